# frozen_string_literal: true

# The advlock gem (lib/advlock.rb).
module Advlock
  # Transaction-scope locks and diagnostics on a connection the caller already has: a
  # PG::Connection, or an ActiveRecord PostgreSQL connection (ActiveRecord::Base.connection).
  module Xact
    LOCK = "SELECT @.advlock_lock_with_timeout(CAST($1 AS text), CAST($2 AS text), CAST($3 AS int4), " \
           "mode => CAST($4 AS text))"
    TRY = "SELECT @.advlock_try_with_timeout(CAST($1 AS text), CAST($2 AS text), CAST($3 AS int4), " \
          "mode => CAST($4 AS text))"
    LOCK_ALL = "SELECT @.advlock_lock_all_with_timeout(CAST($1 AS text), CAST($2 AS text[]), CAST($3 AS int4), " \
               "mode => CAST($4 AS text))"
    HOLDERS = "SELECT key, mode, granted, pid, application_name, backend_state, " \
              "extract(epoch FROM idle_for), is_idle_holder, extract(epoch FROM waiting_since), blocked_by, " \
              "label, scope, extract(epoch FROM held_since) FROM @.advlock_holders"

    # A connection of the caller's: how to reach the PG::Connection, and whether a
    # transaction block is open on it.
    class Conn
      attr_reader :raw

      def self.for(conn)
        return new(conn, nil) if conn.is_a?(PG::Connection)
        return new(nil, conn) if active_record_connection?(conn)

        if conn.respond_to?(:checkout) && conn.respond_to?(:with_connection)
          raise TypeError, "conn: pass a connection, not a pool: pool.with_connection { |conn| ... } (or " \
                           "ActiveRecord::Base.connection)"
        end
        raise TypeError, "conn: expected a PG::Connection or an ActiveRecord PostgreSQL connection, got #{conn.class}"
      end

      def self.active_record_connection?(conn)
        conn.respond_to?(:raw_connection) && conn.respond_to?(:transaction_open?) &&
          conn.respond_to?(:adapter_name) && conn.adapter_name.match?(/postg/i)
      end

      def initialize(raw, active_record)
        @raw = raw
        @active_record = active_record
      end

      # Why a transaction-scope lock taken now would protect nothing, or nil when it is fine.
      def xact_problem
        if @active_record
          unless @active_record.transaction_open?
            return "no transaction is open on this ActiveRecord connection: use `transaction do ... end` around it"
          end

          # raw_connection sends the BEGIN ActiveRecord deferred (its lazy transactions).
          @raw = @active_record.raw_connection
          return status_problem("ActiveRecord::Base.transaction do ... end")
        end
        status_problem("conn.transaction { ... }")
      end

      def raw_connection
        @raw = @active_record.raw_connection if @raw.nil?
        @raw
      end

      def query(sql, params, schema)
        raw = raw_connection
        SQL.exec(raw, sql.gsub("@.", SQL.prefix(raw, schema)), params)
      end

      private

      def status_problem(fix)
        case @raw.transaction_status
        when PG::PQTRANS_INTRANS then nil
        when PG::PQTRANS_INERROR then "the transaction is aborted (a previous statement failed): roll it back first"
        when PG::PQTRANS_IDLE then "no transaction is open: use `#{fix}` around it"
        else "the connection is busy (transaction status #{@raw.transaction_status})"
        end
      end
    end

    # Why each helper needs the caller's transaction (a lock by default).
    NEEDS = {
      "fence" => "records its token with the write transaction",
      "lease_check" => "checks the lease for the write transaction"
    }.freeze

    module_function

    def check!(conn, what)
      problem = conn.xact_problem
      return unless problem

      raise NotInTransaction, "Advlock.#{what} #{NEEDS.fetch(what, 'takes a transaction-scope lock')}, but #{problem}"
    end

    def run_lock(conn, what, sql, params, schema)
      check!(conn, what)
      conn.query(sql, params, schema)
    rescue PG::Error => e
      timeout = SQL.lock_timeout(e)
      raise timeout if timeout

      raise
    end
  end

  LockEntry = Struct.new(:key, :mode, :granted, :pid, :application_name, :backend_state, :idle_for,
                         :is_idle_holder, :waiting_since, :blocked_by, :label, :scope, :held_since)

  class << self
    # Lock (ns, id) for the rest of the current transaction, waiting at most `timeout` seconds in
    # the server's lock queue (advlock_lock_with_timeout); LockTimeout names the holder. With a
    # block, yields and returns its value (the lock still lasts until COMMIT/ROLLBACK: PostgreSQL
    # cannot release a transaction-scope lock earlier). Returns the key otherwise.
    def lock(conn, ns, id = "", timeout:, shared: false, schema: nil)
      args = [Key.check_ns(ns), Key.id_text(id), Args.timeout_ms(timeout), Args.mode(shared)]
      schema = Args.schema(schema)
      Xact.run_lock(Xact::Conn.for(conn), "lock", Xact::LOCK, args, schema)
      block_given? ? yield : key(ns, id)
    end

    # Every (ns, id) of ids or none, within one overall deadline of `timeout` seconds (ascending
    # key order, so callers never deadlock each other). With a block, yields and returns its value.
    def lock_all(conn, ns, ids, timeout:, shared: false, schema: nil)
      texts = Args.ids(ids)
      args = [Key.check_ns(ns), SQL.text_array(texts), Args.timeout_ms(timeout), Args.mode(shared)]
      schema = Args.schema(schema)
      Xact.run_lock(Xact::Conn.for(conn), "lock_all", Xact::LOCK_ALL, args, schema)
      block_given? ? yield : texts.map { |t| key(ns, t) }
    end

    # Take (ns, id) for the rest of the transaction if it is free (or frees up within `timeout`
    # seconds, default 0: no wait): true when held, false when not.
    def try_lock(conn, ns, id = "", timeout: 0, shared: false, schema: nil)
      args = [Key.check_ns(ns), Key.id_text(id), Args.timeout_ms(timeout), Args.mode(shared)]
      schema = Args.schema(schema)
      SQL.bool(Xact.run_lock(Xact::Conn.for(conn), "try_lock", Xact::TRY, args, schema).getvalue(0, 0))
    end

    # ActiveRecord: lock (ns, id) on ActiveRecord::Base.connection (or `connection:`) inside
    # `transaction do ... end`, then run the block. Raises NotInTransaction outside a transaction.
    def with_lock(ns, id = "", timeout:, shared: false, connection: nil, schema: nil, &block)
      raise ArgumentError, "block: Advlock.with_lock needs a block (the work done under the lock)" unless block

      lock(connection || default_connection, ns, id, timeout: timeout, shared: shared, schema: schema, &block)
    end

    # ActiveRecord: lock_all on ActiveRecord::Base.connection (or `connection:`), then the block.
    def with_lock_all(ns, ids, timeout:, shared: false, connection: nil, schema: nil, &block)
      raise ArgumentError, "block: Advlock.with_lock_all needs a block (the work done under the locks)" unless block

      lock_all(connection || default_connection, ns, ids, timeout: timeout, shared: shared, schema: schema, &block)
    end

    # The rows of advlock_holders (holders first, then waiters, by key and pid) as LockEntry
    # structs; with ns, only those of the lock key(ns, id). `conn` defaults to
    # ActiveRecord::Base.connection.
    def holders(conn = nil, ns = nil, id = "", schema: nil)
      sql = Xact::HOLDERS
      params = []
      unless ns.nil?
        sql += " WHERE key = CAST($1 AS int8)"
        params << key(ns, id)
      end
      sql += " ORDER BY NOT granted, key, pid"
      schema = Args.schema(schema)
      Xact::Conn.for(conn || default_connection).query(sql, params, schema).values.map { |r| entry(r) }
    end

    private

    def default_connection
      unless defined?(::ActiveRecord::Base)
        raise ArgumentError, "connection: pass a PG::Connection (ActiveRecord is not loaded, so there is no default)"
      end

      ::ActiveRecord::Base.connection
    end

    def entry(row)
      LockEntry.new(SQL.int(row[0]), row[1], SQL.bool(row[2]), SQL.int(row[3]), row[4], row[5], SQL.float(row[6]),
                    SQL.bool(row[7]), SQL.time(row[8]), SQL.int_array(row[9]), row[10], row[11], SQL.time(row[12]))
    end
  end
end
