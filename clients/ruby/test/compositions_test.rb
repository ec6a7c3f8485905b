# frozen_string_literal: true

require_relative "test_helper"

# Where two features meet (clients/SCENARIOS.md, "compositions"): the idle-lock timeout set
# server-wide while session locks are held, the lock connection terminated mid-body, and a
# statement_timeout shorter than a lock's wait.
class CompositionsTest < AdvlockCase
  def epoch(conn)
    conn.exec("SELECT extract(epoch FROM clock_timestamp())").getvalue(0, 0).to_f
  end

  # advlock.idle_session_lock_timeout set server-wide (ALTER SYSTEM, reloaded) for the block,
  # reset afterwards whatever happens. PostgreSQL 17 takes the setting on a server that has not
  # loaded advlock too (a placeholder the library picks up when a session loads it).
  def with_idle_lock_timeout(value)
    admin.exec("ALTER SYSTEM SET advlock.idle_session_lock_timeout = '#{value}'")
    admin.exec("SELECT pg_reload_conf()")
    wait_until(5, "the reload to reach new sessions") do
      with_conn do |c|
        c.exec("SELECT current_setting('advlock.idle_session_lock_timeout', true)").getvalue(0, 0) == value
      end
    end
    yield
  ensure
    admin.exec("ALTER SYSTEM RESET advlock.idle_session_lock_timeout")
    admin.exec("SELECT pg_reload_conf()")
  end

  def test_s41_idle_lock_timeout_does_not_steal_a_held_session_lock
    with_idle_lock_timeout("1s") do
      if server_kind != "edition"
        # The setting bites: a connection of its own holding a session lock idle is terminated.
        with_conn("leaky") do |leaky|
          leaky.exec("SELECT pg_advisory_lock(advlock_key('leak', 'x'))") # advlock_key loads the library
          wait_until(4, "the idle-lock timeout to end the leaky session") { backends(admin, "leaky").empty? }
          assert_raises(PG::Error) { leaky.exec("SELECT 1") }
        end
      end
      # session_lock's connection opts out for itself: held for more than twice the timeout.
      Advlock.session_lock(DSN, "migrate", timeout: 5, application_name: "s41-holder") do |held|
        sleep 2.5
        held.check!
        assert held.holding?
        assert_equal [[held.pid, true, "ExclusiveLock", Advlock.key("migrate")]], advisory_locks(admin, held.pid)
      end
    end
  end

  # The migration pattern of the README, in two pods started 0.3 s apart, each migrating for
  # 2.5 s on its own connection while its lock connection sits idle: by the server's clock the
  # second starts after the first has ended.
  def test_s41_two_pods_running_the_migration_pattern_never_overlap
    with_idle_lock_timeout("1s") do
      spans = Queue.new
      pods = %w[pod-a pod-b].each_with_index.map do |pod, i|
        Thread.new do
          sleep 0.3 * i
          with_conn(pod) do |db|
            Advlock.session_lock(DSN, "migrate", timeout: 30, application_name: "#{pod}-lock") do |held|
              started = epoch(db)
              sleep 2.5 # the migration
              held.check!
              spans << [started, epoch(db)]
            end
          end
          nil
        rescue StandardError => e
          e
        end
      end
      assert_equal [nil, nil], pods.map(&:value)
      first, second = Array.new(2) { spans.pop }.sort
      assert_operator second[0], :>=, first[1], "the migrations overlapped: #{[first, second].inspect}"
    end
  end

  def terminate(pid)
    with_conn("terminator") { |c| c.exec_params("SELECT pg_terminate_backend($1, 5000)", [pid]) }
  end

  def test_s42_the_body_learns_within_2s_when_its_lock_connection_dies
    learned = nil
    e = assert_raises(Advlock::LockLost) do
      Advlock.session_lock(DSN, "migrate", timeout: 1, application_name: "s42") do |held|
        # The watchdog sends nothing: the lock connection stays idle, its last statement the lock's.
        before = admin.exec_params("SELECT state_change FROM pg_stat_activity WHERE pid = $1", [held.pid]).values
        sleep 1.2
        assert_equal before, admin.exec_params("SELECT state_change FROM pg_stat_activity WHERE pid = $1",
                                               [held.pid]).values
        held.check!
        terminated = now
        terminate(held.pid)
        wait_until(2, "the watchdog to see the lock connection close") { held.lost }
        learned = now - terminated
        assert_raises(Advlock::LockLost) { held.check! }
        refute held.holding?
      end
    end
    assert_operator learned, :<, 2
    refute_kind_of Advlock::LockInterrupted, e
    assert_kind_of PG::ConnectionBad, e.cause
    # The reason is kept: the server's FATAL and its SQLSTATE.
    assert_match(/terminating connection due to administrator command \(SQLSTATE 57P01\)/, e.message)
  end

  def test_s42_interrupt_raises_lock_lost_into_the_body
    interrupted = nil
    started = nil
    e = assert_raises(Advlock::LockInterrupted) do
      Advlock.session_lock(DSN, "migrate", timeout: 1, interrupt: true) do |held|
        Thread.new do
          sleep 0.2
          started = now
          terminate(held.pid)
        end
        begin
          sleep 30 # the migration, stopped when its lock connection dies
        rescue Advlock::LockLost => e
          interrupted = now - started
          raise
        end
        flunk "the body ran on"
      end
    end
    assert_operator interrupted, :<, 2
    assert_kind_of Advlock::LockLost, e
    assert_match(/administrator command/, e.message)
    # A body that swallows it still gets LockLost at exit, and nothing stays pending.
    assert_raises(Advlock::LockLost) do
      Advlock.session_lock(DSN, "migrate", timeout: 1, interrupt: true) do |held|
        terminate(held.pid)
        begin
          sleep 30
        rescue Advlock::LockInterrupted
          nil
        end
      end
    end
    sleep 0.05
  end

  def test_s44_statement_timeout_shorter_than_the_wait_is_the_servers_57014
    with_conn("holder") do |holder|
      holder.transaction do
        Advlock.lock(holder, "account", 42, timeout: 1)
        with_conn("waiter") do |waiter|
          waiter.exec("SET statement_timeout = '300ms'")
          lock_timeout = waiter.exec("SHOW lock_timeout").getvalue(0, 0)
          started = now
          e = assert_raises(PG::QueryCanceled) do
            waiter.transaction { Advlock.lock(waiter, "account", 42, timeout: 5) }
          end
          took = now - started
          assert_operator took, :>=, 0.29
          assert_operator took, :<, 2, "the wait ran #{took} s: statement_timeout was overridden"
          assert_instance_of PG::QueryCanceled, e # passed through unchanged, not a LockTimeout
          assert_equal "57014", e.result.error_field(PG::PG_DIAG_SQLSTATE)
          assert_equal lock_timeout, waiter.exec("SHOW lock_timeout").getvalue(0, 0)
          assert_empty advisory_locks(admin, waiter.backend_pid) # nothing held or queued
          assert_equal [[holder.backend_pid, true, "ExclusiveLock", Advlock.key("account", 42)]], advisory_locks(admin)
        end
      end
    end
  end

  def test_s44_lease_renewals_are_unaffected_by_a_short_statement_timeout
    needs_leases!
    pool = TinyPool.new(2, "s44", dsn: "#{DSN}?options=-c%20statement_timeout%3D300ms")
    lease = Advlock.lease(pool, "report", "s44", ttl: 0.6, timeout: 1) do |l|
      assert_equal("300ms", pool.with { |c| c.exec("SHOW statement_timeout").getvalue(0, 0) })
      sleep 2
      l.check!
      l
    end
    assert_nil lease.lost
    assert_operator lease.renewals, :>=, 8
  ensure
    pool&.close
  end
end
