# frozen_string_literal: true

# advlock: safe PostgreSQL advisory locks from Ruby (the pg gem, and ActiveRecord).
#
# Thin wrappers over the advlock extension's SQL functions (or its SQL edition's): every wait is
# bounded on the server, keys follow advlock's key spec v1, the scope rules are enforced, session
# locks go on a connection of their own (never through a transaction-mode pooler), and leases
# are renewed in the background.
module Advlock
end

require "io/wait"
require "pg"
require_relative "advlock/version"
require_relative "advlock/errors"
require_relative "advlock/key"
require_relative "advlock/args"
require_relative "advlock/sql"
require_relative "advlock/xact"
require_relative "advlock/session"
require_relative "advlock/lease"
require_relative "advlock/election"
require_relative "advlock/fence"
