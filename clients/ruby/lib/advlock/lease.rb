# frozen_string_literal: true

# The advlock gem (lib/advlock.rb).
module Advlock
  # A lease: a lock owned by its id, not by a connection (advlock_lease; needs advlock in
  # shared_preload_libraries). Taken with one statement on any connection, renewed and released
  # with others, so it belongs on a pool: every statement borrows a pooled connection for just
  # that statement. A thread renews it every third of the renew deadline; the block is flagged
  # (#lost, #check!) or, with interrupt: true, interrupted (LeaseInterrupted raised into its
  # thread) once the lease is lost; it is released at the end of the block.
  class Lease
    ACQUIRE = "SELECT @.advlock_lease(CAST($1 AS text), CAST($2 AS text), CAST($3 AS int4), CAST($4 AS int4)," \
              " slots => CAST($5 AS int4))"
    # The wait, when the key is busy: commits first and holds no snapshot while it waits (a
    # holder building an index concurrently is not stalled); needs a connection outside a
    # transaction block (where the pool lends none, the wait runs in ACQUIRE instead).
    WAIT = "CALL @.advlock_wait_lease(CAST($1 AS int8), CAST($2 AS int4), CAST($3 AS int4), CAST($4 AS int4))"
    RENEW = "SELECT @.advlock_lease_renew(CAST($1 AS int8), CAST($2 AS int4))"
    RELEASE = "SELECT @.advlock_lease_release(CAST($1 AS int8))"
    WHO = "SELECT pid, application_name FROM @.advlock_leases WHERE key = CAST($1 AS int8) AND granted ORDER BY lease"
    # After a wait: how long the lease has left by the server's clock (the TTL counts from the
    # grant, which came at some point of the wait), so the renew deadline counts from the grant.
    REMAINING = "SELECT extract(epoch FROM expires_at - clock_timestamp()) FROM @.advlock_leases" \
                " WHERE lease = CAST($1 AS int8) AND granted"

    # Where a lease's statements run: an ActiveRecord connection pool (checkout/checkin), or any
    # pool whose #with(timeout:) yields a PG::Connection or an ActiveRecord connection (the
    # connection_pool gem).
    class Source
      def self.for(source, schema)
        if source.respond_to?(:checkout) && source.respond_to?(:checkin) && source.respond_to?(:with_connection)
          return new(source, :active_record, schema)
        end
        return new(source.connection_pool, :active_record, schema) if source.respond_to?(:connection_pool) &&
                                                                      source.is_a?(Class)
        return new(source, :with, schema) if source.respond_to?(:with) && !source.is_a?(PG::Connection)

        refuse(source)
      end

      def self.refuse(source)
        if source.is_a?(PG::Connection) || Xact::Conn.active_record_connection?(source)
          raise TypeError, "source: pass a pool (ActiveRecord::Base.connection_pool, or a pool with #with), not " \
                           "a connection: one connection runs one statement at a time and is not shared across " \
                           "threads, so the background renewals would collide with your queries"
        end
        raise TypeError, "source: expected a connection pool (ActiveRecord::Base.connection_pool, or a pool " \
                         "whose #with yields a PG::Connection), got #{source.class}"
      end

      def initialize(pool, kind, schema)
        @pool = pool
        @kind = kind
        @schema = schema
      end

      # One statement's rows on a borrowed connection (waiting at most `timeout` seconds for one).
      def query(sql, params, timeout = nil)
        borrow(timeout) { |raw| SQL.exec(raw, sql.gsub("@.", SQL.prefix(raw, @schema)), params).values }
      end

      # A CALL's row, run outside any transaction block (a pooled connection is idle when lent);
      # nil when the connection lent is inside one.
      def call(sql, params)
        borrow do |raw|
          next nil unless raw.transaction_status == PG::PQTRANS_IDLE

          SQL.exec(raw, sql.gsub("@.", SQL.prefix(raw, @schema)), params).values
        end
      end

      # Yields a PG::Connection borrowed for one statement (waiting at most `timeout` seconds for
      # it when given). A connection that a restart or a failover broke is not lent again as it
      # is: one a connection error left broken is reconnected before the statement, and one that
      # failed with a connection error is reconnected when it fails (libpq picks the host again
      # from a multi-host DSN: the new primary, with target_session_attrs=read-write), so the
      # next statement, a renewal's retry, runs on a fresh connection of the same pool.
      def borrow(timeout = nil, &block)
        lend(timeout) do |conn|
          raw = Source.raw(conn)
          reconnect(conn) if raw.finished? || raw.status != PG::CONNECTION_OK
          begin
            block.call(Source.raw(conn))
          rescue PG::Error => e
            reconnect_quietly(conn) if Source.connection_error?(e, Source.raw(conn))
            raise
          end
        end
      end

      # The errors of a server restarting or failing over: the connection refused, reset or
      # closed (class 08, or libpq's ConnectionBad / UnableToSend), the server shutting down
      # (57P01, 57P02) or starting up (57P03), or read-only (25006: a standby, or a new primary
      # not yet promoted).
      def self.connection_error?(error, raw)
        state = SQL.sqlstate(error).to_s
        error.is_a?(PG::ConnectionBad) || error.is_a?(PG::UnableToSend) || raw.finished? ||
          raw.status != PG::CONNECTION_OK || state.start_with?("08") || %w[57P01 57P02 57P03 25006].include?(state)
      end

      def self.raw(conn)
        conn.is_a?(PG::Connection) ? conn : conn.raw_connection
      end

      private

      # Yields a connection of the pool: an ActiveRecord connection, or what #with yields.
      def lend(timeout, &block)
        if @kind == :active_record
          conn = timeout ? @pool.checkout([timeout, 0.001].max) : @pool.checkout
          begin
            block.call(conn)
          ensure
            @pool.checkin(conn)
          end
        else
          args = timeout ? { timeout: [timeout, 0.001].max } : {}
          @pool.with(**args, &block)
        end
      end

      # A new server session on the pooled connection (ActiveRecord's reconnect! also sets the
      # session up as ActiveRecord does); raises while the server cannot be reached.
      def reconnect(conn)
        conn.is_a?(PG::Connection) ? conn.reset : conn.reconnect!
      end

      # After a failed statement: the statement's error is what the caller sees; a reconnection
      # that fails too is tried again before the connection's next statement.
      def reconnect_quietly(conn)
        reconnect(conn)
      rescue StandardError
        nil
      end
    end

    # The lease and election functions: a 42883 naming one means this database has none.
    LEASE_FUNCTIONS = /advlock_(lease\w*|wait_lease|campaign|wait_campaign|leader|observe_leader|wait_leader|resign)\b/

    # NotPreloaded for 55000 (advlock not in shared_preload_libraries), LeasesUnavailable for 42883
    # on a lease or election function (the SQL edition, or an extension older than them: leases
    # came in 0.4.0, elections in 0.5.0), else nil.
    def self.unavailable(error)
      state = SQL.sqlstate(error)
      missing = error.message[LEASE_FUNCTIONS] if state == "42883"
      if state == "55000" && error.message.include?("shared_preload_libraries")
        NotPreloaded.new("leases need the advlock library preloaded: add advlock to shared_preload_libraries in " \
                         "postgresql.conf (shared_preload_libraries = 'advlock') and restart PostgreSQL " \
                         "(server: #{error.message.strip})")
      elsif missing
        LeasesUnavailable.new("this database has no #{missing}(): leases (and elections) need the advlock extension " \
                              "(the SQL edition has none) in a version that has them (leases: 0.4.0, elections: " \
                              "0.5.0), preloaded via shared_preload_libraries (server: #{error.message.strip})")
      end
    end

    attr_reader :ns, :id, :key, :ttl_ms, :timeout_ms, :slots, :renew_deadline_ms, :token, :lost, :renewals

    def initialize(source, ns, id, ttl, timeout, slots, renew_deadline, schema, interrupt)
      @ns = Key.check_ns(ns)
      @id = Key.id_text(id)
      @key = Key.key(ns, id)
      @ttl_ms = Args.positive_ms(ttl, "ttl")

      @timeout_ms = Args.timeout_ms(timeout)
      @slots = Args.slots(slots)
      @renew_deadline_ms = renew_deadline.nil? ? @ttl_ms * 2 / 3 : Args.positive_ms(renew_deadline, "renew_deadline")
      unless @renew_deadline_ms.positive? && @renew_deadline_ms < @ttl_ms
        raise ArgumentError, "renew_deadline must be more than 0 and less than ttl (#{ttl.inspect} s): the block " \
                             "must stop before the server ends the lease, got #{renew_deadline.inspect}"
      end
      raise TypeError, "interrupt must be true or false, got #{interrupt.class}" unless [true,
                                                                                         false].include?(interrupt)

      @source = Source.for(source, Args.schema(schema))
      @interrupt = interrupt
      @token = 0
      @lost = nil
      @renewals = 0
      @interval = @renew_deadline_ms / 3000.0 # two retries after a failure before the deadline
      @deadline = 0.0
      @stopped_at_deadline = false
      @last_error = nil
      @closing = false
      @interrupted = false
      @mutex = Mutex.new
      @stop = ConditionVariable.new
    end

    def inspect
      state = if @lost
                "lost"
              elsif @token.positive?
                "held"
              else
                "not taken"
              end
      "#<Advlock::Lease advlock_key(#{@ns.inspect}, #{@id.inspect}) token=#{@token} #{state}>"
    end

    # Raises LeaseLost if the lease is lost or its renew deadline has passed: call it before a
    # write that must not run late (and fence the write with #token anyway).
    def check!
      @mutex.synchronize { past_deadline? } if @lost.nil? && @token.positive? && !@closing
      raise lost_error if @lost
    end

    def lost?
      check!
      false
    rescue LeaseLost
      true
    end

    def run
      Thread.handle_interrupt(LeaseInterrupted => :never) do
        acquire
        @body = Thread.current
        @renewer = Thread.new { renew_loop }
        @renewer.report_on_exception = false
        begin
          Thread.handle_interrupt(LeaseInterrupted => :immediate) { yield self }
        ensure
          close
        end
      end
    end

    private

    def now
      Process.clock_gettime(Process::CLOCK_MONOTONIC)
    end

    # What is held ("lease"; a leader's "term of leadership"), and the statements' arguments.
    def what
      "lease"
    end

    def acquire_args(wait_ms)
      [@ns, @id, @ttl_ms, wait_ms, @slots]
    end

    def wait_args
      [@key, @ttl_ms, @timeout_ms, @slots]
    end

    def granted(rows)
      rows.nil? || rows.empty? || rows[0][0].nil? ? nil : Integer(rows[0][0], 10)
    end

    def acquire
      sent_at = now
      token = granted(@source.query(self.class::ACQUIRE, acquire_args(0)))
      waited = token.nil? && @timeout_ms.positive?
      if waited
        sent_at = now
        called = @source.call(self.class::WAIT, wait_args)
        called = @source.query(self.class::ACQUIRE, acquire_args(@timeout_ms)) if called.nil?
        token = granted(called)
      end
      raise timeout_error(@source.query(WHO, [@key])) if token.nil?

      @token = token
      begin
        @deadline = granted_deadline(sent_at, waited)
      rescue Exception # rubocop:disable Lint/RescueException -- also Timeout and Thread#raise: nobody would renew it
        release_quietly
        raise
      end
    rescue PG::Error => e
      unavailable = Lease.unavailable(e)
      raise unavailable if unavailable

      raise
    end

    # The renew deadline of a fresh grant: renew_deadline after the grant. The grant came after
    # the statement that asked was sent (sent_at); after a wait it may have come much later, so
    # the server says how long the lease has left, and the deadline is that much minus the part
    # of the TTL kept as the margin (ttl - renew_deadline) from when we asked: both are lower
    # bounds of the local time of grant + renew_deadline, and no client/server clock offset enters.
    def granted_deadline(sent_at, waited)
      deadline = sent_at + (@renew_deadline_ms / 1000.0)
      return deadline unless waited

      asked_at = now
      remaining = @source.query(REMAINING, [@token]).first&.first
      if remaining.nil?
        @mutex.synchronize do
          mark_lost(Error.new("the #{what} had already ended when its grant was read (released or expired)"))
        end
        return deadline
      end

      [deadline, asked_at + Float(remaining) - ((@ttl_ms - @renew_deadline_ms) / 1000.0)].max
    end

    # A lease granted but not taken up (reading its grant failed): released, not left to run out
    # while nobody renews it; the error that stopped it is what the caller sees.
    def release_quietly
      @source.query(self.class::RELEASE, [@token])
    rescue StandardError
      nil
    end

    def label
      "advlock_key('#{@ns}', '#{@id}')"
    end

    # LeaseInterrupted once the block was interrupted (interrupt: true): what it was raised with
    # is what leaving the block raises, also when the block swallowed it.
    def lost_error
      (@interrupted ? LeaseInterrupted : LeaseLost).new("the #{what} on #{label} (token #{@token}) was lost: " \
                                                        "#{@lost.message}")
    end

    def timeout_error(rows)
      held_by = rows.map { |p, app| Args.holder_text(p, app) }
      LeaseTimeout.new(
        "could not obtain a #{what} on key #{@key} = #{label} within #{@timeout_ms} ms" \
        "#{@slots > 1 ? " (#{@slots} slots)" : ''}#{held_by.empty? ? '' : ": held by #{held_by.join('; ')}"}",
        holders: rows.map { |p, app| Holder.new(Integer(p, 10), app, nil) }
      )
    end

    # Called with @mutex held.
    def mark_lost(reason)
      @lost = reason if @lost.nil?
    end

    # Called with @mutex held.
    def past_deadline?
      return false if now < @deadline

      why = "no renewal succeeded before the renew deadline (#{@renew_deadline_ms} ms of the ttl of #{@ttl_ms} ms)"
      mark_lost(Error.new(@last_error ? "#{why}; last error: #{@last_error.inspect}" : why))
      @stopped_at_deadline = true
      true
    end

    # Called with @mutex held.
    def next_delay
      remaining = [0.0, @deadline - now].max
      return [@interval, remaining].min if @last_error.nil?

      [remaining, [0.01, [@interval, remaining / 4].min].max].min
    end

    def renew_loop
      loop do
        @mutex.synchronize do
          @stop.wait(@mutex, next_delay) unless @closing
          return if @closing
          return stop_body if past_deadline?
        end
        sent_at = now
        begin
          rows = @source.query(RENEW, [@token, @ttl_ms], @deadline - sent_at)
        rescue StandardError => e
          # Not yet renewed (only a false answer loses the lease): a pool timeout, or the server
          # restarting or failing over (the lease survives it on the server: the same id is
          # renewed again on a fresh connection of the pool, see Source#borrow) until the deadline.
          @mutex.synchronize { @last_error = e }
          next
        end
        @mutex.synchronize do
          if SQL.bool(rows[0][0])
            # It did renew (also when exiting: whether it still holds, the release decides).
            @renewals += 1
            @deadline = sent_at + (@renew_deadline_ms / 1000.0)
            @last_error = nil
          else
            mark_lost(Error.new("advlock_lease_renew returned false: the lease expired or was released by someone " \
                                "else"))
          end
          return if @closing
          return stop_body if @lost
        end
      end
    end

    # Called with @mutex held, the lease lost and the block still running.
    def stop_body
      return unless @interrupt

      @interrupted = true
      @body.raise(lost_error)
    end

    def close
      @mutex.synchronize do
        @closing = true
        @stop.signal
      end
      # A LeaseInterrupted the renewer raised just before: taken back here, not left pending.
      begin
        Thread.handle_interrupt(LeaseInterrupted => :immediate) { nil }
      rescue LeaseInterrupted
        nil
      end
      @renewer&.join
      # Stopped at the renew deadline: left to run out on the server at its TTL rather than
      # released, so a statement the block still had in flight ends before anyone else is granted it.
      if !@stopped_at_deadline && !SQL.bool(@source.query(self.class::RELEASE, [@token])[0][0])
        @mutex.synchronize { mark_lost(Error.new("its release found the #{what} already ended")) }
      end
      raise lost_error, cause: @lost if @lost
    end
  end

  class << self
    # A lease on (ns, id) for the block, on `source`: ActiveRecord::Base.connection_pool (or an
    # ActiveRecord model class), or a pool whose #with yields a PG::Connection. Taken with a
    # server-side bounded wait of at most `timeout` seconds that holds no snapshot (CALL
    # advlock_wait_lease; LeaseTimeout after, naming the holders), renewed by a background thread
    # on any pooled connection, released at the end of the block whatever happens. Yields the
    # Lease: #token is the lease id and its fencing token. The block is stopped at the renew
    # deadline, `renew_deadline` seconds (default 2/3 of ttl) after the grant or the last renewal
    # sent, before the server's TTL runs out: #check! raises LeaseLost from then on, and with
    # interrupt: true LeaseInterrupted (a LeaseLost) is raised into the block's thread at once.
    # The end of the block raises LeaseLost if the lease was lost (LeaseInterrupted if it
    # interrupted the block). `slots: N` lets N leases hold the key at once. Needs advlock in
    # shared_preload_libraries (NotPreloaded otherwise).
    def lease(source, ns, id = "", ttl:, timeout:, slots: 1, renew_deadline: nil, schema: nil, interrupt: false,
              &block)
      lease = Lease.new(source, ns, id, ttl, timeout, slots, renew_deadline, schema, interrupt)
      raise ArgumentError, "block: Advlock.lease needs a block (the work done under the lease)" unless block

      lease.run(&block)
    end
  end
end
