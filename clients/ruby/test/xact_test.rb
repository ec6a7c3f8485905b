# frozen_string_literal: true

require_relative "test_helper"

# Transaction-scope locks on a PG::Connection and through ActiveRecord: held until the
# transaction ends, refused outside one, bounded waits that name the holder, all-or-nothing
# sets, holders, and interrupted waits that leave nothing behind.
class XactTest < AdvlockCase
  KEY42 = Advlock.key("account", 42)

  def test_s03_lock_is_held_until_commit_and_released_after
    with_conn do |conn|
      pid = conn.backend_pid
      conn.transaction do
        assert_equal KEY42, Advlock.lock(conn, "account", 42, timeout: 2.0)
        assert_equal [[pid, true, "ExclusiveLock", KEY42]], advisory_locks(admin, pid)
        assert_equal :done, Advlock.lock(conn, "account", 42, timeout: 2.0) { :done }
        # The block's end releases nothing: PostgreSQL ends xact locks at COMMIT.
        assert_equal [pid, true, "ExclusiveLock", KEY42], advisory_locks(admin, pid).first
      end
      assert_empty advisory_locks(admin, pid)
    end
  end

  def test_s03_shared_mode
    with_conn do |a|
      with_conn do |b|
        a.transaction do
          b.transaction do
            Advlock.lock(a, "report", "q3", timeout: 1, shared: true)
            Advlock.lock(b, "report", "q3", timeout: 1, shared: true)
            shared = advisory_locks(admin).map { |r| r[1..] }
            assert_equal [[true, "ShareLock", Advlock.key("report", "q3")]] * 2, shared
            with_conn { |c| c.transaction { refute Advlock.try_lock(c, "report", "q3") } }
          end
        end
      end
    end
  end

  def test_s04_lock_outside_a_transaction_names_the_fix
    with_conn do |conn|
      e = assert_raises(Advlock::NotInTransaction) { Advlock.lock(conn, "account", 42, timeout: 1) }
      assert_match(/use `conn\.transaction \{ \.\.\. \}` around it/, e.message)
      assert_raises(Advlock::NotInTransaction) { Advlock.try_lock(conn, "account", 42) }
      assert_raises(Advlock::NotInTransaction) { Advlock.lock_all(conn, "account", [1, 2], timeout: 1) }
      assert_empty advisory_locks(admin, conn.backend_pid)
    end
  end

  def test_s04_aborted_transaction_is_reported
    with_conn do |conn|
      conn.exec("BEGIN")
      assert_raises(PG::DivisionByZero) { conn.exec("SELECT 1/0") }
      e = assert_raises(Advlock::NotInTransaction) { Advlock.try_lock(conn, "account", 42) }
      assert_match(/aborted/, e.message)
      conn.exec("ROLLBACK")
    end
  end

  def test_s05_bounded_wait_of_200_ms_leaves_lock_timeout_unchanged
    with_conn("holder") do |holder|
      with_conn("waiter") do |conn|
        holder.exec("SET lock_timeout = '7s'")
        conn.exec("SET lock_timeout = '3s'")
        holder.transaction do
          assert Advlock.try_lock(holder, "account", 42)
          conn.transaction do
            started = now
            assert_raises(Advlock::LockTimeout) { Advlock.lock(conn, "account", 42, timeout: 0.2) }
            elapsed = now - started
            # The server waited (≈200 ms), not the client: generous upper bound on a busy machine.
            assert_operator elapsed, :>=, 0.19
            assert_operator elapsed, :<, 5.0
          end
        end
        assert_empty advisory_locks(admin, conn.backend_pid)
        assert_equal "3s", conn.exec("SHOW lock_timeout").getvalue(0, 0)
        assert_equal "7s", holder.exec("SHOW lock_timeout").getvalue(0, 0)
      end
    end
  end

  def test_s06_s07_two_workers_race_for_account_42
    results = Queue.new
    release = Queue.new
    gate = Queue.new
    workers = %w[worker-1 worker-2].map do |name|
      Thread.new do
        with_conn(name) do |conn|
          conn.transaction do
            gate.pop
            got = Advlock.try_lock(conn, "account", 42)
            results << [name, got, conn.backend_pid]
            release.pop if got
          end
        end
      end
    end
    2.times { gate << :go }
    outcomes = [results.pop, results.pop]
    winners = outcomes.select { |_, got, _| got }
    assert_equal 1, winners.size, outcomes.inspect
    winner_name, _, winner_pid = winners.first
    assert_equal [[winner_pid, true, "ExclusiveLock", KEY42]], advisory_locks(admin)
    # A third worker that waits instead is told who holds it, by the server's DETAIL.
    with_conn("worker-3") do |conn|
      conn.transaction do
        e = assert_raises(Advlock::LockTimeout) { Advlock.lock(conn, "account", 42, timeout: 0.1) }
        assert_equal [winner_pid, winner_name], [e.pid, e.application_name]
        assert_equal "idle in transaction", e.holders.first.state
        assert_kind_of Advlock::Error, e
      end
    end
  ensure
    2.times { release << :done }
    workers&.each(&:join)
  end

  def test_s08_lock_all_takes_every_key_or_none
    with_conn("a") do |a|
      with_conn("b") do |b|
        a.transaction do
          keys = Advlock.lock_all(a, "account", [42, 17], timeout: 1.0)
          assert_equal [Advlock.key("account", 42), Advlock.key("account", 17)].sort, keys.sort
          assert_equal keys.sort, advisory_locks(admin, a.backend_pid).map(&:last).sort
          b.transaction do
            e = assert_raises(Advlock::LockTimeout) { Advlock.lock_all(b, "account", [99, 17], timeout: 0.1) }
            assert_equal a.backend_pid, e.pid
            # b gave back key 99 it had taken: all or nothing.
            assert_empty advisory_locks(admin, b.backend_pid)
          end
        end
      end
    end
  end

  def test_s09_holders
    t = nil
    with_conn("holder") do |conn|
      with_conn("waiter") do |waiter|
        conn.transaction do
          assert Advlock.try_lock(conn, "account", 42)
          t = Thread.new { waiter.transaction { Advlock.lock(waiter, "account", 42, timeout: 10) } }
          wait_until(10, "the waiter to queue") { waiting?(admin, waiter.backend_pid) }
          rows = Advlock.holders(admin, "account", 42)
          assert_equal [[conn.backend_pid, true, "exclusive", KEY42], [waiter.backend_pid, false, "exclusive", KEY42]],
                       (rows.map { |r| [r.pid, r.granted, r.mode, r.key] })
          assert_equal "holder", rows[0].application_name
          assert_equal [conn.backend_pid], rows[1].blocked_by
          assert_kind_of Time, rows[1].waiting_since
          assert_empty Advlock.holders(admin, "account", 43)
          assert_equal 2, Advlock.holders(admin).size
        end
        t.join # the waiter got it at our COMMIT
      end
    end
  end

  # A wait in lock() interrupted from the caller's side: Timeout.timeout, or the thread killed.
  def cancel_a_waiting_lock
    with_conn("holder") do |holder|
      holder.transaction do
        assert Advlock.try_lock(holder, "account", 42)
        with_conn("waiter") do |conn|
          pid = conn.backend_pid
          started = now
          yield conn, pid
          assert_operator now - started, :<, 10, "the wait was not cut short"
          # Nothing held or queued for that backend, at once, while the holder still holds.
          assert_empty advisory_locks(admin, pid)
          assert_equal [[holder.backend_pid, true, "ExclusiveLock", KEY42]], advisory_locks(admin)
          assert_equal "idle", admin.exec_params("SELECT state FROM pg_stat_activity WHERE pid = $1", [pid])
                                    .getvalue(0, 0)
          assert_equal "42", conn.exec("SELECT 41 + 1").getvalue(0, 0)
        end
      end
    end
  end

  def test_s10_timeout_timeout_leaves_nothing_held_or_queued
    cancel_a_waiting_lock do |conn, pid|
      assert_raises(Timeout::Error) do
        Timeout.timeout(0.5) { conn.transaction { Advlock.lock(conn, "account", 42, timeout: 30) } }
      end
      refute waiting?(admin, pid)
    end
  end

  def test_s10_killed_thread_leaves_nothing_held_or_queued
    cancel_a_waiting_lock do |conn, pid|
      t = Thread.new { conn.transaction { Advlock.lock(conn, "account", 42, timeout: 30) } }
      wait_until(10, "the thread to queue in the server") { waiting?(admin, pid) }
      t.kill
      t.join
      refute waiting?(admin, pid)
      # The connection is left in an aborted or rolled-back transaction by the kill: roll back.
      conn.exec("ROLLBACK") unless conn.transaction_status == PG::PQTRANS_IDLE
    end
  end

  # ---- ActiveRecord -------------------------------------------------------------------------

  def test_s03_s33_active_record_with_lock_inside_transaction
    active_record!
    model = ActiveRecord::Base
    pid = model.connection.select_value("SELECT pg_backend_pid()").to_i
    result = model.transaction do
      Advlock.with_lock("account", 42, timeout: 2) do
        assert_equal [[pid, true, "ExclusiveLock", KEY42]], advisory_locks(admin, pid)
        :worked
      end
    end
    assert_equal :worked, result
    assert_empty advisory_locks(admin, pid)
    model.transaction do
      assert Advlock.try_lock(model.connection, "account", 17)
      Advlock.with_lock_all("account", [1, 2], timeout: 1) { assert_equal 3, advisory_locks(admin, pid).size }
      assert_equal [pid], Advlock.holders(nil, "account", 17).map(&:pid)
    end
    assert_empty advisory_locks(admin, pid)
  ensure
    ActiveRecord::Base.remove_connection
  end

  def test_s04_s33_active_record_outside_a_transaction_is_refused
    active_record!
    e = assert_raises(Advlock::NotInTransaction) { Advlock.with_lock("account", 42, timeout: 1) { flunk "ran" } }
    assert_match(/`transaction do \.\.\. end`/, e.message)
    assert_empty advisory_locks(admin)
  ensure
    ActiveRecord::Base.remove_connection
  end

  def test_s06_s33_active_record_lock_timeout_names_the_holder
    active_record!
    with_conn("ar-holder") do |holder|
      holder.transaction do
        assert Advlock.try_lock(holder, "account", 42)
        e = assert_raises(Advlock::LockTimeout) do
          ActiveRecord::Base.transaction { Advlock.with_lock("account", 42, timeout: 0.2) { flunk "ran" } }
        end
        assert_equal [holder.backend_pid, "ar-holder"], [e.pid, e.application_name]
        # The transaction was rolled back by ActiveRecord; the connection goes on.
        assert_equal 1, ActiveRecord::Base.connection.select_value("SELECT 1").to_i
      end
    end
  ensure
    ActiveRecord::Base.remove_connection
  end

  def test_s10_s33_active_record_timeout_timeout_leaves_nothing
    active_record!
    with_conn("holder") do |holder|
      holder.transaction do
        assert Advlock.try_lock(holder, "account", 42)
        pid = ActiveRecord::Base.connection.select_value("SELECT pg_backend_pid()").to_i
        assert_raises(Timeout::Error) do
          Timeout.timeout(0.5) do
            ActiveRecord::Base.transaction { Advlock.with_lock("account", 42, timeout: 30) { nil } }
          end
        end
        assert_empty advisory_locks(admin, pid)
        assert_equal 1, ActiveRecord::Base.connection.select_value("SELECT 1").to_i
      end
    end
  ensure
    ActiveRecord::Base.remove_connection
  end
end
