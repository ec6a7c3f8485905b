// advlock: safe PostgreSQL advisory locks from Node (node-postgres and postgres.js).
// Thin wrappers over the advlock extension's SQL functions: every wait is bounded on the server,
// keys follow advlock's key spec v1, and the scope rules are enforced, not documented.
export { key, type Id } from "./key.js";
export {
  AdvlockError,
  FenceRefusedError,
  type Holder,
  LeaseLostError,
  LeaseNotHeldError,
  LeaseTimeoutError,
  LeasesUnavailableError,
  LockLostError,
  LockTimeoutError,
  NotInTransactionError,
  NotInstalledError,
  NotPreloadedError,
  UnsafePoolerError,
} from "./errors.js";
export {
  type ConnOf,
  type Db,
  type LockEntry,
  type LockOptions,
  type TryLockOptions,
  holders,
  tryLock,
  withLock,
  withLockAll,
} from "./xact.js";
export { type Driver, SessionLock, type SessionLockOptions, sessionLock, withSessionLock } from "./session.js";
export { type Lease, type LeaseOptions, type LeaseSource, type LeaderOptions, type Leadership, lease, leader } from "./lease.js";
export { type Leader, type ObserveOptions, observe } from "./election.js";
export { type WriteTransaction, fence, leaseCheck } from "./fence.js";
export type { PgClientLike, PgPoolLike, PostgresJsLike } from "./driver.js";
export const version = "0.6.0";
