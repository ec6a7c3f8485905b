//! The two dimensions of an advisory lock request, at the bottom of the module graph so that the
//! lock-manager layer (`lockmgr`) depends on nothing above it. Parsing them from SQL arguments
//! lives with the other argument checks (`lock_request`).

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Scope {
    /// Released at commit/rollback of the current transaction.
    Xact,
    /// Held until `advlock_unlock` or disconnect.
    Session,
}

impl Scope {
    /// "xact" / "session": the one spelling of a scope, as arguments take it and views show it.
    pub fn word(self) -> &'static str {
        match self {
            Scope::Xact => "xact",
            Scope::Session => "session",
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Mode {
    Exclusive,
    Shared,
}

impl Mode {
    /// "exclusive" / "shared": the one spelling of a mode, in messages and in every view.
    pub fn word(self) -> &'static str {
        match self {
            Mode::Exclusive => "exclusive",
            Mode::Shared => "shared",
        }
    }

    /// The other of the two modes.
    pub fn other(self) -> Mode {
        match self {
            Mode::Exclusive => Mode::Shared,
            Mode::Shared => Mode::Exclusive,
        }
    }

    /// The mode of a label or token entry, from its shared flag.
    pub fn of_shared(shared: bool) -> Mode {
        if shared {
            Mode::Shared
        } else {
            Mode::Exclusive
        }
    }
}
