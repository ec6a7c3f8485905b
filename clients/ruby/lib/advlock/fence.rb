# frozen_string_literal: true

# The advlock gem (lib/advlock.rb).
module Advlock
  # Checks a writer makes inside its own write transaction (docs/fences.md): advlock_fence lets a
  # fencing token pass only while no larger one has (LK001 otherwise), advlock_lease_check raises
  # LK002 once a lease has ended. Both abort the transaction when they refuse, so the write rolls
  # back with the check.
  module Fence
    FENCE = "SELECT @.advlock_fence(CAST($1 AS text), CAST($2 AS text), CAST($3 AS int8))"
    LEASE_CHECK = "SELECT @.advlock_lease_check(CAST($1 AS int8))"
    # The server's message: "fence of key K refused token T: token P has passed it".
    PASSED = /token (\d+) has passed it/
    TOKEN_MAX = (2**63) - 1

    module_function

    def token(token, name)
      raise TypeError, "#{name} must be an Integer (a fencing token), got #{token.class}" unless token.is_a?(Integer)
      unless token.between?(1, TOKEN_MAX)
        raise ArgumentError, "#{name} must be a positive bigint (advlock's tokens are), got #{token}"
      end

      token
    end

    def run(conn, what, sql, params, schema, token)
      conn = Xact::Conn.for(conn)
      Xact.check!(conn, what)
      conn.query(sql, params, schema)
      nil
    rescue PG::Error => e
      refused = refusal(e, token)
      raise refused if refused

      raise
    end

    # FenceRefused for LK001, LeaseNotHeld for LK002 (the server's message and DETAIL kept), else nil.
    def refusal(error, token)
      result = error.result
      return nil unless result

      message = result.error_field(PG::PG_DIAG_MESSAGE_PRIMARY)
      detail = result.error_field(PG::PG_DIAG_MESSAGE_DETAIL)
      case result.error_field(PG::PG_DIAG_SQLSTATE)
      when "LK001"
        FenceRefused.new(message, token: token, passed: message[PASSED, 1]&.to_i, detail: detail)
      when "LK002"
        LeaseNotHeld.new(detail ? "#{message}\nDETAIL: #{detail}" : message)
      end
    end
  end

  class << self
    # Pass the fence of (ns, id) with `token` in the current write transaction (advlock_fence),
    # first, before the writes it protects: FenceRefused (LK001) when a larger token has already
    # passed it (a newer holder took over: roll back and stop writing), else the token is
    # recorded with the transaction. NotInTransaction outside a transaction block. Works with the
    # extension and the SQL edition.
    def fence(conn, ns, id = "", token:, schema: nil)
      params = [Key.check_ns(ns), Key.id_text(id), Fence.token(token, "token")]
      Fence.run(conn, "fence", Fence::FENCE, params, Args.schema(schema), token)
    end

    # Raise LeaseNotHeld (advlock_lease_check, LK002) unless the lease (its token) is still held,
    # inside the current transaction (NotInTransaction outside one). Needs advlock preloaded.
    def lease_check(conn, lease, schema: nil)
      token = Fence.token(lease, "lease")
      Fence.run(conn, "lease_check", Fence::LEASE_CHECK, [token], Args.schema(schema), token)
    rescue PG::Error => e
      unavailable = Lease.unavailable(e)
      raise unavailable if unavailable

      raise
    end
  end
end
