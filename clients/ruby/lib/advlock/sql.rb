# frozen_string_literal: true

require "pg"

module Advlock
  # Running advlock's SQL on a PG::Connection: the schema advlock lives in (found once per
  # connection, or given), statements that end on the server when the caller is interrupted,
  # and the reading of the answers (text: no type map of the caller's is touched).
  module SQL
    # The schema of the advlock extension, or else of the SQL edition (the schema of
    # advlock_key() first on search_path, then by name); NULL when neither is installed.
    SCHEMA_EXPR =
      "coalesce((SELECT n.nspname FROM pg_catalog.pg_extension e JOIN pg_catalog.pg_namespace n" \
      " ON n.oid = e.extnamespace WHERE e.extname = 'advlock')," \
      " (SELECT n.nspname FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace" \
      " WHERE p.proname = 'advlock_key'" \
      " ORDER BY pg_catalog.array_position(pg_catalog.current_schemas(false), n.nspname) NULLS LAST, n.nspname" \
      " LIMIT 1))"
    LOOKUP = "SELECT #{SCHEMA_EXPR}, pg_catalog.current_database()".freeze

    # The prefix found for a PG::Connection, as long as the connection lives: pools hand out the
    # same connections again, so the lookup costs one round trip per connection.
    FOUND = ObjectSpace::WeakMap.new
    FOUND_LOCK = Mutex.new

    ALL_STRINGS = PG::TypeMapAllStrings.new

    module_function

    def quote_ident(name)
      %("#{name.gsub('"', '""')}")
    end

    # The `"schema".` prefix of a lookup row, or NotInstalled naming the fix.
    def prefix_of(schema, database)
      if schema.nil?
        raise NotInstalled,
              "advlock is not installed in database #{database.inspect}: run CREATE EXTENSION advlock there (or " \
              "install the SQL edition, edition/advlock_sql.sql), or pass schema: naming the schema it is installed in"
      end

      "#{quote_ident(schema)}."
    end

    def prefix(raw, schema)
      return "#{quote_ident(schema)}." if schema

      found = FOUND_LOCK.synchronize { FOUND[raw] }
      return found if found

      row = exec(raw, LOOKUP, []).values.first
      found = prefix_of(row[0], row[1])
      FOUND_LOCK.synchronize { FOUND[raw] = found }
      found
    end

    # exec_params, ended on the server when the calling thread is interrupted (Timeout,
    # Thread#raise, Thread#kill, Interrupt) while the statement runs: libpq would otherwise
    # leave it running (a lock wait stays queued until its timeout) and the next statement
    # would wait for it. The cancel is sent and the connection drained before unwinding.
    def exec(raw, sql, params)
      done = false
      result = raw.exec_params(sql, params)
      done = true
      result.type_map = ALL_STRINGS # text, whatever type map the caller's connection has (ActiveRecord sets one)
      result
    ensure
      cancel_running(raw) unless done
    end

    def cancel_running(raw)
      return unless raw.transaction_status == PG::PQTRANS_ACTIVE

      raw.cancel
      raw.discard_results
    rescue PG::Error, IOError
      nil # the connection is gone: so is its wait
    end

    def bool(value)
      value.nil? ? nil : value == "t"
    end

    def int(value)
      value.nil? ? nil : Integer(value, 10)
    end

    def float(value)
      value.nil? ? nil : Float(value)
    end

    def time(epoch)
      epoch.nil? ? nil : Time.at(Rational(epoch))
    end

    def int_array(value)
      return nil if value.nil?

      PG::TextDecoder::Array.new.decode(value).map { |v| Integer(v, 10) }
    end

    def text_array(values)
      PG::TextEncoder::Array.new.encode(values)
    end

    # The LockTimeout for a PG error that is (or was caused by) SQLSTATE 55P03, else nil.
    def lock_timeout(error)
      seen = {}.compare_by_identity
      e = error
      while e && !seen[e]
        seen[e] = true
        if e.is_a?(PG::Error) && e.result && e.result.error_field(PG::PG_DIAG_SQLSTATE) == "55P03"
          message = e.result.error_field(PG::PG_DIAG_MESSAGE_PRIMARY)
          detail = e.result.error_field(PG::PG_DIAG_MESSAGE_DETAIL)
          return LockTimeout.new(message, detail: detail)
        end
        e = e.cause
      end
      nil
    end

    def sqlstate(error)
      e = error
      e = e.cause while e && !(e.is_a?(PG::Error) && e.result)
      e&.result&.error_field(PG::PG_DIAG_SQLSTATE)
    end
  end
end
