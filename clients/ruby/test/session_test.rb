# frozen_string_literal: true

require_relative "test_helper"
require "uri"

# session_lock(dsn, ...): its own connection, a fencing token, refusal of pools, busy locks,
# lost connections, fenced writes, interrupted waits, and waits that do not stall
# CREATE INDEX CONCURRENTLY.
class SessionTest < AdvlockCase
  KEY = Advlock.key("migrate")

  def test_s11_session_lock_holds_until_exit_then_closes
    first = Advlock.session_lock(DSN, "migrate", timeout: 1.0, application_name: "migrator") do |held|
      assert_operator held.token, :>, 0
      assert_equal KEY, held.key
      assert_equal [held.pid], backends(admin, "migrator")
      assert_equal [[held.pid, true, "ExclusiveLock", KEY]], advisory_locks(admin, held.pid)
      # A session lock: no transaction is open on its connection.
      assert_equal "idle", admin.exec_params("SELECT state FROM pg_stat_activity WHERE pid = $1", [held.pid])
                                .getvalue(0, 0)
      assert held.holding?
      held.token
    end
    assert_empty advisory_locks(admin)
    wait_until(5, "the dedicated connection to close") { backends(admin, "migrator").empty? }
    Advlock.session_lock(DSN, "migrate", timeout: 1.0) do |again|
      assert_operator again.token, :>, first # fencing tokens increase across acquisitions
    end
  end

  def test_s12_pools_and_pooled_connections_are_refused
    pool = active_record!
    raw = connect
    [pool, ActiveRecord::Base.connection, raw].each do |thing|
      e = assert_raises(TypeError) { Advlock.session_lock(thing, "migrate", timeout: 1) { flunk "ran" } }
      assert_match(/\Adsn: session_lock takes a DSN .*Advlock\.session_lock\(dsn, \.\.\.\)/, e.message)
    end
  ensure
    raw&.close
    ActiveRecord::Base.remove_connection
  end

  def test_s12_key_value_dsns_and_active_record_configuration
    uri = URI.parse(DSN)
    key_value = "host=#{uri.host} port=#{uri.port} dbname=#{uri.path.delete_prefix('/')} user=postgres"
    active_record!
    config = ActiveRecord::Base.connection_db_config.configuration_hash
    [DSN, key_value, config].each do |dsn|
      Advlock.session_lock(dsn, "migrate", timeout: 1) do |held|
        assert_equal [[held.pid, true, "ExclusiveLock", KEY]], advisory_locks(admin, held.pid)
      end
    end
  ensure
    ActiveRecord::Base.remove_connection
  end

  def test_s13_busy_lock_times_out_naming_the_holder_and_closes
    Advlock.session_lock(DSN, "migrate", timeout: 1.0, application_name: "first") do |held|
      started = now
      e = assert_raises(Advlock::LockTimeout) do
        Advlock.session_lock(DSN, "migrate", timeout: 0.2, application_name: "second") { flunk "two holders" }
      end
      assert_operator now - started, :>=, 0.19
      assert_equal [held.pid, "first"], [e.pid, e.application_name]
      assert_match(/within 200 ms: held by PID #{held.pid}/, e.message)
      wait_until(5, "the refused connection to close") { backends(admin, "second").empty? }
      assert_equal [[held.pid, true, "ExclusiveLock", KEY]], advisory_locks(admin)
    end
  end

  def test_s13_a_waiter_gets_the_lock_when_the_holder_exits
    order = Queue.new
    release = Queue.new
    first = Thread.new do
      Advlock.session_lock(DSN, "migrate", timeout: 5, application_name: "migration-1") do
        order << :first_in
        release.pop
        order << :first_out
      end
    end
    assert_equal :first_in, order.pop
    second = Thread.new do
      Advlock.session_lock(DSN, "migrate", timeout: 10, application_name: "migration-2") { order << :second_in }
    end
    wait_until(10, "the second to queue") { advisory_locks(admin).any? { |r| !r[1] } }
    release << :go
    [first, second].each(&:join)
    assert_equal %i[first_out second_in], [order.pop, order.pop]
  end

  def test_s14_body_error_still_unlocks_and_closes
    assert_raises(ZeroDivisionError) do
      Advlock.session_lock(DSN, "migrate", timeout: 1, application_name: "x") { 1 / 0 }
    end
    assert_empty advisory_locks(admin)
    wait_until(5, "the dedicated connection to close") { backends(admin, "x").empty? }
  end

  def setup_fenced
    admin.exec("DROP TABLE IF EXISTS fenced_resource_rb")
    admin.exec("CREATE TABLE fenced_resource_rb (id int PRIMARY KEY, value text, fence bigint NOT NULL)")
    admin.exec("INSERT INTO fenced_resource_rb VALUES (1, 'initial', 0)")
  end

  def fenced_write(conn, value, token)
    conn.exec_params("UPDATE fenced_resource_rb SET value = $1, fence = $2 WHERE id = 1 AND fence < $2",
                     [value, token]).cmd_tuples
  end

  def test_s15_s16_leader_election_with_fenced_write_after_termination
    setup_fenced
    with_conn("writer-a") do |writer_a|
      with_conn("writer-b") do |writer_b|
        lost = assert_raises(Advlock::LockLost) do
          Advlock.session_lock(DSN, "leader", "report", timeout: 1.0) do |leader_a|
            t1 = leader_a.token
            assert_equal 1, fenced_write(writer_a, "a1", t1)
            # The leader's backend is cut off (partition, pooler restart, admin) while it runs on.
            assert_equal "t", admin.exec_params("SELECT pg_terminate_backend($1, 5000)", [leader_a.pid]).getvalue(0, 0)
            refute leader_a.holding? # the loss is seen, not an exception here
            Advlock.session_lock(DSN, "leader", "report", timeout: 5.0) do |leader_b|
              assert_operator leader_b.token, :>, t1
              assert_equal 1, fenced_write(writer_b, "b1", leader_b.token)
              assert_equal 0, fenced_write(writer_a, "a-late", t1) # the old leader's late write changes nothing
            end
          end
        end
        assert_match(/was lost/, lost.message)
        assert_kind_of PG::Error, lost.cause
      end
    end
    assert_equal "b1", admin.exec("SELECT value FROM fenced_resource_rb").getvalue(0, 0)
  end

  def test_s15_a_lost_connection_is_reported_even_without_holding
    assert_raises(Advlock::LockLost) do
      Advlock.session_lock(DSN, "leader", "x", timeout: 1.0) do |held|
        admin.exec_params("SELECT pg_terminate_backend($1, 5000)", [held.pid])
      end
    end
  end

  def interrupted_wait
    Advlock.session_lock(DSN, "migrate", timeout: 1.0) do |held|
      started = now
      yield
      wait_until(5, "the interrupted waiter's backend to end") { backends(admin, "w").empty? }
      assert_operator now - started, :<, 10
      assert_equal [[held.pid, true, "ExclusiveLock", KEY]], advisory_locks(admin)
    end
  end

  def test_s19_timeout_timeout_of_a_waiting_session_lock_leaves_no_waiter
    interrupted_wait do
      assert_raises(Timeout::Error) do
        Timeout.timeout(0.5) do
          Advlock.session_lock(DSN, "migrate", timeout: 30, application_name: "w") { flunk "must not get it" }
        end
      end
    end
  end

  def test_s14_s19_killed_thread_waiting_for_a_session_lock_leaves_no_waiter
    interrupted_wait do
      t = Thread.new do
        Advlock.session_lock(DSN, "migrate", timeout: 30, application_name: "w") { flunk "must not get it" }
      end
      wait_until(10, "the waiter to queue") { advisory_locks(admin).any? { |r| !r[1] } }
      t.kill
      t.join
    end
  end

  # [backend_xmin is null, wait_event_type] of the waiting pod, once it waits.
  def waiter_state(app)
    row = admin.exec_params("SELECT backend_xmin IS NULL, wait_event_type FROM pg_stat_activity " \
                            "WHERE application_name = $1 AND state = 'active'", [app]).values.first
    row && row[1] ? [row[0] == "t", row[1]] : nil
  end

  # Pod 1 holds the lock and builds an index concurrently; pod 2 waits (through the client, or
  # with wait_sql, the old way). How long the build took, and what pod 2 got.
  def run_cic(wait_sql)
    admin.exec("DROP TABLE IF EXISTS cic_target_rb")
    admin.exec("CREATE TABLE cic_target_rb AS SELECT g AS id FROM generate_series(1, 1000) g")
    got = []
    took = nil
    pod2 = nil
    Advlock.session_lock(DSN, "migrate", timeout: 1.0, application_name: "pod1") do |held|
      pod2 = Thread.new do
        if wait_sql
          with_conn("pod2") do |c|
            got << c.exec(wait_sql).getvalue(0, 0)
            c.exec("SELECT pg_advisory_unlock_all()")
          end
        else
          Advlock.session_lock(DSN, "migrate", timeout: 20.0, application_name: "pod2") { |h| got << h.token }
        end
      rescue StandardError => e
        got << e
      end
      got.unshift(wait_until(10, "pod 2 to wait") { waiter_state("pod2") })
      with_conn("pod1-migration") do |migration|
        started = now
        migration.exec("CREATE INDEX CONCURRENTLY cic_target_rb_id ON cic_target_rb (id)")
        took = now - started
      end
      assert held.holding?
    end
    pod2.join(30)
    admin.exec("DROP TABLE cic_target_rb")
    [took, got]
  end

  def test_s20_waiting_pod_does_not_stall_create_index_concurrently
    needs_snapshot_free_wait!
    took, got = run_cic(nil)
    assert_equal [true, "Lock"], got[0] # no snapshot while waiting: CIC has nothing to wait for
    assert_operator took, :<, 5, "CREATE INDEX CONCURRENTLY took #{took} s"
    assert_equal 2, got.size, got.inspect
    assert_kind_of Integer, got[1]
  end

  def test_s20_the_old_wait_inside_a_statement_stalls_it
    needs_snapshot_free_wait!
    took, got = run_cic("SELECT advlock_try_with_token('migrate', '', 6000)")
    assert_equal [false, "Lock"], got[0] # a waiter with a snapshot
    assert_operator took, :>, 5, "CREATE INDEX CONCURRENTLY took only #{took} s"
    assert_nil got[1] # and the waiter timed out
  end
end
