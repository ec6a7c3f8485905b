# frozen_string_literal: true

# The advlock gem (lib/advlock.rb).
module Advlock
  # A session lock on a connection of its own, to one server session (Advlock.session_lock).
  #
  # A session lock outlives transactions, so on a pooled connection it would outlive the code
  # that took it: session_lock takes a DSN, opens its own connection, and unlocks and closes it
  # when the block exits. A DSN can still lead to a pooler: in transaction or statement mode the
  # server session is handed to other clients between transactions, and a session lock taken
  # there is shared with them. So before locking, the connection proves it is one server
  # session: the protocol's backend pid (BackendKeyData) equals pg_backend_pid(), or, behind a
  # pooler (which announces its own pid), a second connection opened at the same moment reaches
  # a different backend, and the backend reached holds no advisory lock it never asked for.
  # Every later statement checks it ran on the same backend with the backend's local transaction
  # counter advanced by exactly one (nobody else's transaction in between).
  #
  # No probe is conclusive: a busy transaction-mode pool can hand the probe another backend and
  # our next transaction to anyone. A lock taken between transactions there could be stranded on
  # a server session we can no longer reach (and the pool would hand it to every later client).
  # So behind a pooler the lock lives inside one open transaction block, from the try to the
  # unlock: in every pooling mode an open transaction keeps its server session, so the lock is
  # only ever taken on the pinned backend and released there. The block's first statement greets
  # again and pins the backend it reached. Between statements (read committed) the block holds no
  # snapshot.
  #
  # The wait goes through CALL advlock_wait_lock, which commits first and waits holding no
  # snapshot (CREATE INDEX CONCURRENTLY is not stalled). A CALL cannot commit inside a
  # transaction block, so behind a pooler, and in the SQL edition (which has no such procedure),
  # the wait runs inside the statement.
  class HeldLock
    # Each statement reports its backend and that backend's local transaction counter (the lxid
    # of its virtual transaction id), which each of our autocommit statements advances by one
    # (and the statements inside the pinning block share).
    BACKEND = "(SELECT pg_catalog.pg_backend_pid() AS pid," \
              " (SELECT CAST(pg_catalog.split_part(l.virtualtransaction, '/', 2) AS int8) FROM pg_catalog.pg_locks l" \
              " WHERE l.locktype = 'virtualxid' AND l.pid = pg_catalog.pg_backend_pid()) AS lxid) b"
    # advlock.idle_session_lock_timeout terminates a session idle outside a transaction while it
    # holds a session lock: exactly what this connection does on purpose while the block works
    # elsewhere. So it opts out for itself (0), on a direct connection only (where the protocol's
    # pid is the backend's: behind a pooler the setting would outlive us on a server session the
    # pool hands to others, and there the lock is held inside a transaction, which the setting
    # never touches), and only where the setting exists (the library loaded, or a value given in
    # postgresql.conf, ALTER DATABASE/ROLE, which applies once the library loads): nothing is set
    # on the SQL edition or a server without advlock. $1 is the protocol's pid.
    OPT_OUT = "CASE WHEN b.pid = CAST($1 AS int4)" \
              " AND pg_catalog.current_setting('advlock.idle_session_lock_timeout', true) IS NOT NULL" \
              " THEN pg_catalog.set_config('advlock.idle_session_lock_timeout', '0', false) END"
    HELLO = "WITH s AS (SELECT #{SQL::SCHEMA_EXPR} AS nspname)" \
            " SELECT b.pid, b.lxid, s.nspname, pg_catalog.current_database()," \
            " EXISTS (SELECT FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace" \
            " WHERE n.nspname = s.nspname AND p.proname = 'advlock_wait_lock' AND p.prokind = 'p')," \
            " EXISTS (SELECT FROM pg_catalog.pg_locks l WHERE l.locktype = 'advisory' AND l.pid = b.pid)," \
            " #{OPT_OUT} FROM s, #{BACKEND}".freeze
    HELLO_SCHEMA = "SELECT b.pid, b.lxid, CAST($2 AS text), pg_catalog.current_database()," \
                   " EXISTS (SELECT FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n" \
                   " ON n.oid = p.pronamespace WHERE n.nspname = $2 AND p.proname = 'advlock_wait_lock'" \
                   " AND p.prokind = 'p')," \
                   " EXISTS (SELECT FROM pg_catalog.pg_locks l WHERE l.locktype = 'advisory' AND l.pid = b.pid)," \
                   " #{OPT_OUT} FROM #{BACKEND}".freeze
    ON_OURS = "b.pid = CAST($1 AS int4) AND b.lxid = CAST($2 AS int8)"
    TRY = "SELECT b.pid, b.lxid, CASE WHEN #{ON_OURS} THEN @.advlock_try_with_token(CAST($3 AS text)," \
          " CAST($4 AS text), CAST($5 AS int4), mode => CAST($6 AS text)) END FROM #{BACKEND}".freeze
    # CALL's arguments cannot hold a subquery: the pid alone guards it (its key is NULL on another
    # backend, which it refuses with 22004), and the next statement checks the counter.
    WAIT = "CALL @.advlock_wait_lock(CASE WHEN pg_catalog.pg_backend_pid() = CAST($1 AS int4)" \
           " THEN CAST($2 AS int8) END, CAST($3 AS int4), CAST($4 AS text))"
    CALL_LXIDS = 2 # the CALL's transaction and the one it starts by committing first
    HOLDING = "SELECT b.pid, b.lxid, CASE WHEN #{ON_OURS} THEN @.advlock_holding(CAST($3 AS text)," \
              " CAST($4 AS text), CAST($5 AS text)) END FROM #{BACKEND}".freeze
    # The unlock runs on the pinned backend even when the counter moved: the lock is there.
    UNLOCK = "SELECT b.pid, b.lxid, CASE WHEN b.pid = CAST($1 AS int4) THEN @.advlock_unlock(CAST($2 AS text)," \
             " CAST($3 AS text), CAST($4 AS text)) END FROM #{BACKEND}".freeze
    WHO = "SELECT pid, application_name, backend_state FROM @.advlock_holders" \
          " WHERE key = CAST($1 AS int8) AND granted ORDER BY pid"
    PID = "SELECT pg_catalog.pg_backend_pid()"
    # Behind a pooler: the block that pins the server session for the life of the lock.
    PIN = "BEGIN"
    UNPIN = "COMMIT"
    # How long the pooler probe's second connection may take to answer (a session-mode pool
    # with no free server connection makes it wait: inconclusive, not refused).
    PROBE_WAIT = 2.0
    INSTEAD = "use a DSN that reaches PostgreSQL itself (not the pooler), a pooler in session mode, " \
              "Advlock.lease (which any pool can carry), or Advlock.lock in a transaction"

    attr_reader :ns, :id, :key, :mode, :timeout_ms, :token, :pid, :lost

    def initialize(dsn, ns, id, timeout, shared, application_name, schema, interrupt)
      @dsn = HeldLock.check_dsn(dsn)
      @ns = Key.check_ns(ns)
      @id = Key.id_text(id)
      @key = Key.key(ns, id)
      @mode = Args.mode(shared)
      @timeout_ms = Args.timeout_ms(timeout)
      @application_name = Args.application_name(application_name)
      @schema = Args.schema(schema)
      @token = 0
      @pid = 0
      @lost = nil
      @next_lxid = 0 # the backend's transaction counter at our next statement
      @pinned = false # behind a pooler: inside the transaction block that pins the backend
      unless [true, false].include?(interrupt)
        raise TypeError, "interrupt must be true or false, got #{interrupt.class}"
      end

      @interrupt = interrupt
      @interrupted = false
      @io_lock = Mutex.new # the body's statements (holding?) and the watchdog take turns on @conn
    end

    def self.check_dsn(dsn)
      dsn = conninfo(dsn) if dsn.is_a?(Hash)
      unless dsn.is_a?(String)
        raise TypeError,
              "dsn: session_lock takes a DSN (a connection string) and opens its own connection; got #{dsn.class}. " \
              "A session lock on a pooled connection outlives your code (the pool hands it, lock included, to the " \
              "next borrower): use Advlock.session_lock(dsn, ...) (for ActiveRecord: " \
              "ActiveRecord::Base.connection_db_config.configuration_hash, or its url), or Advlock.lock in a " \
              "transaction on the pooled connection"
      end
      unless dsn.match?(%r{\Apostgres(ql)?://}i)
        begin
          PG::Connection.conninfo_parse(dsn)
        rescue PG::Error => e
          raise ArgumentError, "dsn: not a libpq connection string (key=value pairs or a URI): #{e.message.strip}"
        end
      end
      dsn
    end

    # A Hash of connection parameters (libpq's names, or ActiveRecord's configuration_hash:
    # database, username; keys libpq does not know, such as adapter or pool, are left out) as a
    # key=value connection string.
    def self.conninfo(params)
      h = params.transform_keys(&:to_s)
      h["dbname"] ||= h.delete("database")
      h["user"] ||= h.delete("username")
      known = PG::Connection.conndefaults.map { |d| d[:keyword] }
      h.select { |k, v| known.include?(k) && !v.nil? }
       .map { |k, v| "#{k}='#{v.to_s.gsub(/[\\']/) { |c| "\\#{c}" }}'" }.join(" ")
    end

    def run
      connect
      ready = false
      begin
        if greet
          probed(probe_pid)
          pin
        end
        acquire
        ready = true
      ensure
        # Refused, failed or interrupted (Timeout and Thread#kill unwind through ensure only).
        @conn.close unless ready || @conn.finished?
      end
      Thread.handle_interrupt(LockInterrupted => :never) do
        watch
        Thread.handle_interrupt(LockInterrupted => :immediate) { yield self }
      ensure
        release
      end
    end

    # Raises LockLost once the lock's connection is gone (the watchdog saw it close, or a
    # statement failed on it): call it between steps, before a write that must not run unprotected
    # (and fence the write with #token anyway).
    def check!
      raise lost_error if @lost
    end

    # Whether this connection still holds the lock (advlock_holding). false, not an error, once
    # the connection is lost (or found shared by a pooler); the block's end raises LockLost then.
    def holding?
      @io_lock.synchronize do
        return false if @lost

        pid, lxid, holding = row(HOLDING, [@pid, @next_lxid, @ns, @id, @mode])
        on_ours(pid, lxid)
        SQL.bool(holding) == true
      rescue UnsafePooler => e
        @lost = e
        false
      rescue PG::Error => e
        raise unless connection_lost?(e)

        @lost = e
        false
      end
    end

    def inspect
      "#<Advlock::HeldLock advlock_key(#{@ns.inspect}, #{@id.inspect}) token=#{@token} pid=#{@pid}>"
    end

    private

    def connect
      options = @application_name ? { application_name: @application_name } : {}
      @conn = PG.connect(@dsn, **options)
      @protocol_pid = @conn.backend_pid
      # The FATAL a server sends before it closes an idle connection (a terminated backend, a
      # shutdown) reaches libpq outside any statement, as a notice: kept as the reason of a loss.
      @conn.set_notice_receiver do |notice|
        if notice.error_field(PG::PG_DIAG_SEVERITY_NONLOCALIZED) == "FATAL"
          @farewell = "#{notice.error_message.strip} (SQLSTATE #{notice.error_field(PG::PG_DIAG_SQLSTATE)})"
        end
      end
    end

    # The watchdog: a thread that waits on the lock connection's socket (no query, no timer) and
    # marks the lock lost when the server closes it (a terminated backend, a restart, the
    # connection cut with a reset), at once: #check! raises from then on, and with
    # interrupt: true LockInterrupted is raised into the block's thread. Data that arrives while
    # no statement runs (the server's FATAL, then the end of the stream) is read here under
    # @io_lock, so it never takes a statement's answer.
    def watch
      @body = Thread.current
      socket = @conn.socket_io
      # Written to by stop_watching; both ends are closed there, after the watchdog has ended.
      stop, @stop_watch = @stop_pipe = IO.pipe
      @watchdog = Thread.new do
        loop do
          break if IO.select([socket, stop])[0].include?(stop)
          break if @io_lock.synchronize { @lost ||= closed_by_server(socket) }
        end
        interrupt_body if @lost
      rescue IOError, SystemCallError => e # the socket closed under the select
        @io_lock.synchronize { @lost ||= e }
        interrupt_body
      end
      @watchdog.report_on_exception = false
    end

    # With @io_lock held: the connection error once the server has closed the connection, nil
    # while it lives (what woke the watchdog was a statement's answer, or a notice).
    def closed_by_server(socket)
      return nil unless socket.wait_readable(0)

      read_pending
      @conn.status == PG::CONNECTION_OK ? nil : closed(PG::ConnectionBad.new("the connection is closed"))
    rescue PG::Error, IOError, SystemCallError => e
      closed(e)
    end

    # Reads what arrived and parses it (consume_input only reads; is_busy parses: a FATAL is
    # handed to the notice receiver then), also what was read just before the end of the stream.
    def read_pending
      @conn.consume_input
      @conn.is_busy
    rescue PG::Error
      begin
        @conn.is_busy
      rescue PG::Error
        nil
      end
      raise
    end

    # The connection error, with the server's reason when it sent one.
    def closed(error)
      return error unless @farewell

      PG::ConnectionBad.new("the server closed the lock's connection: #{@farewell}")
    end

    def interrupt_body
      return unless @interrupt && !@closing

      @interrupted = true
      @body.raise(lost_error(LockInterrupted))
    end

    def stop_watching
      @closing = true
      return unless @watchdog

      @stop_watch.write("x") # the read end is open until here: the watchdog may have ended already
      @watchdog.join
      @stop_pipe.each(&:close)
      # A LockInterrupted the watchdog raised just before: taken back here, not left pending.
      begin
        Thread.handle_interrupt(LockInterrupted => :immediate) { nil }
      rescue LockInterrupted
        nil
      end
    end

    def lost_error(type = LockLost)
      type.new("the session lock on advlock_key('#{@ns}', '#{@id}') (token #{@token}) was lost: " \
               "#{@lost.message.strip}")
    end

    def rows(sql, params)
      SQL.exec(@conn, sql.gsub("@.", @prefix || ""), params).values
    end

    def row(sql, params)
      rows(sql, params).first
    end

    # Reads the first statement's answer; true when a pooler stands between (the protocol's
    # pid is not the backend's), so the probe must look further and the lock be pinned.
    def greet
      pid, lxid, schema, database, has_wait, holds_advisory =
        @schema ? row(HELLO_SCHEMA, [@protocol_pid, @schema]) : row(HELLO, [@protocol_pid])
      @prefix = SQL.prefix_of(schema, database)
      @snapshot_free_wait = SQL.bool(has_wait)
      @pid = SQL.int(pid)
      @next_lxid = @pinned ? SQL.int(lxid) : SQL.int(lxid) + 1
      return false if @pid == @protocol_pid

      if SQL.bool(holds_advisory)
        raise UnsafePooler,
              "session_lock: the server session behind this new connection (backend #{@pid}, reached through a " \
              "pooler: the protocol announced pid #{@protocol_pid}) already holds advisory locks this connection " \
              "never took, so the pooler shares it with other clients (transaction or statement pooling): #{INSTEAD}"
      end
      true
    end

    # pg_backend_pid() on a second connection opened now, or nil when none answered within
    # PROBE_WAIT seconds (the thread is left to finish on its own: a pool that never answers
    # ends it with its own query_wait_timeout).
    def probe_pid
      options = @application_name ? { application_name: @application_name } : {}
      dsn = @dsn
      thread = Thread.new do
        c = PG.connect(dsn, **options)
        begin
          c.exec(PID).getvalue(0, 0).to_i
        ensure
          c.close
        end
      rescue StandardError => e
        e
      end
      thread.report_on_exception = false
      return nil unless thread.join(PROBE_WAIT)

      got = thread.value
      raise got if got.is_a?(Exception)

      got
    end

    def probed(probe)
      return unless probe == @pid

      raise UnsafePooler,
            "session_lock: the DSN leads to a pooler in transaction or statement mode: two connections opened at " \
            "once were both served by backend #{@pid} (a session lock taken there would be shared with every " \
            "client the pooler hands that backend to): #{INSTEAD}"
    end

    # Opens the block that keeps this connection on one server session until the unlock (a
    # statement-mode pooler refuses it), then greets again inside it: the backend the block
    # reached (maybe not the first statement's, harmless now that it is pinned) is the one the
    # lock goes on, unless it already holds advisory locks.
    def pin
      begin
        SQL.exec(@conn, PIN, [])
      rescue PG::Error => e
        raise UnsafePooler,
              "session_lock: the pooler refused a transaction block (#{e.message.strip}), so it would not keep " \
              "one server session for this connection (statement pooling): #{INSTEAD}"
      end
      @pinned = true
      greet
    end

    # After the unlock: ends the pinning block (closing the connection would roll it back, and a
    # pooler drops a server connection its client left inside a transaction).
    def unpin
      SQL.exec(@conn, UNPIN, []) if @pinned
    end

    # A statement ran on the pinned backend with nobody else's transaction in between.
    def on_ours(pid, lxid)
      pid = SQL.int(pid)
      lxid = SQL.int(lxid)
      if pid != @pid
        raise UnsafePooler,
              "session_lock: this connection's statements reached backend #{pid} after backend #{@pid}: a pooler " \
              "is moving it between server sessions (transaction or statement pooling): #{INSTEAD}"
      end
      expected = @next_lxid % (2**32)
      if lxid != expected
        raise UnsafePooler,
              "session_lock: another client ran transactions on backend #{pid} between two statements of this " \
              "connection (its transaction counter went from #{expected - 1} to #{lxid}): a pooler shares the " \
              "server session (transaction or statement pooling): #{INSTEAD}"
      end
      # Inside the pinning block every statement is part of one transaction.
      @next_lxid = @pinned ? lxid : lxid + 1
    end

    def try(wait_ms)
      pid, lxid, token = row(TRY, [@pid, @next_lxid, @ns, @id, wait_ms, @mode])
      on_ours(pid, lxid)
      token
    end

    # Whether the wait goes through CALL: it commits first, which it cannot do inside the
    # pinning block.
    def calls?
      @snapshot_free_wait && !@pinned
    end

    def acquire
      # With CALL: a try without waiting first (one round trip when free), then CALL for the
      # wait. Without it (the SQL edition, or pinned behind a pooler): the whole wait in the
      # statement.
      token = try(calls? ? 0 : @timeout_ms)
      token = wait_then_try if token.nil? && calls? && @timeout_ms.positive?
      raise timeout_error(rows(WHO, [@key])) if token.nil?

      @token = Integer(token, 10)
    end

    def wait_then_try
      begin
        acquired = SQL.bool(row(WAIT, [@pid, @key, @timeout_ms, @mode])[0])
      rescue PG::Error => e
        raise e unless SQL.sqlstate(e) == "22004"

        raise UnsafePooler,
              "session_lock: the wait reached another backend than #{@pid}: a pooler is moving this connection " \
              "between server sessions (transaction or statement pooling): #{INSTEAD}"
      end
      @next_lxid += CALL_LXIDS
      return nil unless acquired

      # Held once by the CALL; a second hold returns the fencing token, then give one back.
      token = try(0)
      unlocked(row(UNLOCK, [@pid, @ns, @id, @mode]))
      raise @lost if @lost

      token
    end

    def unlocked(answer)
      pid, lxid, released = answer
      begin
        on_ours(pid, lxid)
      rescue UnsafePooler => e
        @lost = e
        return
      end
      @lost = Error.new("advlock_unlock found the lock not held") unless SQL.bool(released)
    end

    def timeout_error(rows)
      held_by = rows.map { |p, app, state| Args.holder_text(p, app, state) }
      LockTimeout.new(
        "could not obtain #{@mode} session lock on key #{@key} = advlock_key('#{@ns}', '#{@id}') within " \
        "#{@timeout_ms} ms#{held_by.empty? ? '' : ": held by #{held_by.join('; ')}"}",
        holders: rows.map { |p, app, state| Holder.new(Integer(p, 10), app, state) }
      )
    end

    def connection_lost?(error)
      state = SQL.sqlstate(error).to_s
      @conn.finished? || @conn.status != PG::CONNECTION_OK || state.start_with?("08") ||
        %w[57P01 57P02 57P03].include?(state)
    end

    def release
      stop_watching
      unless @lost
        begin
          unlocked(row(UNLOCK, [@pid, @ns, @id, @mode]))
          unpin unless @lost
        rescue PG::Error => e
          raise unless connection_lost?(e)

          @lost = e
        end
      end
    ensure
      @conn.close unless @conn.finished? # releases anything left, whatever happened above
      raise lost_error(@interrupted ? LockInterrupted : LockLost), cause: @lost if @lost
    end
  end

  class << self
    # A session lock on (ns, id), held on a dedicated connection opened from `dsn` (a libpq URI or
    # key=value string) while the block runs; yields the HeldLock (#token: a fencing token, #pid:
    # the server backend, #holding?). The connection must be one server session: a pooler in
    # transaction or statement mode is refused (UnsafePooler); behind any pooler the lock is held
    # inside one transaction block, which keeps the server session. Waits at most `timeout`
    # seconds (through CALL advlock_wait_lock, holding no snapshot; inside the statement behind a
    # pooler and in the SQL edition), then LockTimeout naming the holder. The connection opts out
    # of advlock.idle_session_lock_timeout for itself (where the setting exists), and a watchdog
    # thread waits on its socket: once the server closes it, #lost is set, #check! raises
    # LockLost, and with interrupt: true LockInterrupted (a LockLost) is raised into the block's
    # thread. At the end of the block it unlocks and closes the connection; if the connection was
    # lost meanwhile, LockLost (LockInterrupted if it interrupted the block) is raised, caused by
    # the connection error, instead of passing silently.
    def session_lock(dsn, ns, id = "", timeout:, shared: false, application_name: nil, schema: nil, interrupt: false,
                     &block)
      held = HeldLock.new(dsn, ns, id, timeout, shared, application_name, schema, interrupt)
      raise ArgumentError, "block: Advlock.session_lock needs a block (the lock is held while it runs)" unless block

      held.run(&block)
    end
  end
end
