# frozen_string_literal: true

require_relative "test_helper"

# Leases on ActiveRecord's pool (and any pool with #with): taken, renewed in the background on
# several pooled backends, released at exit; lost leases flag or interrupt the block; the renew
# deadline; fenced writes; timeouts, slots, interrupted waits; servers without leases.
class LeaseTest < AdvlockCase
  def teardown
    ActiveRecord::Base.remove_connection
    super
  end

  def row_of(token)
    lease_rows(admin).find { |r| r[0] == token }
  end

  # The pid renewing `token` once a renewal newer than `since` (epoch seconds) shows.
  def renewed_by(token, since)
    wait_until(5, "a renewal") do
      admin.exec_params("SELECT pid FROM advlock_leases WHERE lease = $1 AND renewed_at > to_timestamp($2)",
                        [token, since]).values.first&.first&.to_i
    end
  end

  def release_all
    admin.exec("SELECT advlock_lease_release(lease) FROM advlock_leases WHERE granted")
  end

  def test_s21_renewed_on_two_pooled_backends_and_released
    needs_leases!
    pool = TinyPool.new(2, "lease-pool")
    lease = Advlock.lease(pool, "report", "daily", ttl: 0.6, timeout: 1.0) do |l|
      assert_operator l.token, :>, 0
      assert_equal true, row_of(l.token)[1]
      x = pool.take
      x_pid = x.backend_pid
      first = renewed_by(l.token, Time.now.to_f)
      refute_equal x_pid, first
      y = pool.take # the only other connection: the one that just renewed
      assert_equal first, y.backend_pid
      pool.give(x)
      second = renewed_by(l.token, Time.now.to_f)
      assert_equal x_pid, second
      pool.give(y)
      l.check!
      l
    end
    assert_nil lease.lost
    assert_operator lease.renewals, :>=, 2
    assert_nil row_of(lease.token) # released at exit, renewals stopped
  ensure
    pool&.close
  end

  def test_s21_s30_active_record_pool_and_model
    needs_leases!
    pool = active_record!(pool: 3)
    [pool, ActiveRecord::Base].each do |source|
      lease = Advlock.lease(source, "report", "ar", ttl: 0.6, timeout: 1.0) do |l|
        wait_until(5, "two renewals") { l.renewals >= 2 }
        refute_nil row_of(l.token)
        ActiveRecord::Base.connection.select_value("SELECT 1") # the block uses the pool too
        l
      end
      assert_nil row_of(lease.token)
    end
  end

  def test_s22_released_at_exit_whatever_happens
    needs_leases!
    pool = active_record!(pool: 2)
    token = nil
    assert_raises(ZeroDivisionError) do
      Advlock.lease(pool, "report", "boom", ttl: 5.0, timeout: 1.0) do |l|
        token = l.token
        refute_nil row_of(token)
        1 / 0
      end
    end
    assert_nil row_of(token)
    # Interrupted from outside (Timeout), and its thread killed: released too.
    assert_raises(Timeout::Error) do
      Timeout.timeout(0.3) { Advlock.lease(pool, "report", "boom", ttl: 5.0, timeout: 1.0) { sleep 30 } }
    end
    entered = Queue.new
    t = Thread.new do
      Advlock.lease(pool, "report", "boom", ttl: 5.0, timeout: 1.0) do
        entered << 1
        sleep 30
      end
    end
    entered.pop
    t.kill
    t.join
    assert_empty lease_rows(admin)
  end

  def test_s23_released_by_someone_else_flags_the_block_and_exit_raises
    needs_leases!
    pool = active_record!(pool: 2)
    lease = nil
    e = assert_raises(Advlock::LeaseLost) do
      Advlock.lease(pool, "report", "daily", ttl: 1.0, timeout: 1.0) do |l|
        lease = l
        release_all
        wait_until(5, "the renewal thread to notice") { l.lost }
        err = assert_raises(Advlock::LeaseLost) { l.check! }
        assert_match(/token #{l.token}\) was lost: advlock_lease_renew returned false/, err.message)
        assert l.lost?
      end
    end
    assert_kind_of Advlock::LockLost, e
    refute_nil lease.lost
  end

  def test_s23_interrupt_raises_into_the_block_even_if_it_swallows_it
    needs_leases!
    pool = active_record!(pool: 2)
    reached_end = false
    interrupted = nil
    started = now
    # What interrupts the block is what leaving it raises: LeaseInterrupted, a LeaseLost.
    e = assert_raises(Advlock::LeaseInterrupted) do
      Advlock.lease(pool, "report", "daily", ttl: 1.0, timeout: 1.0, interrupt: true) do
        release_all
        begin
          sleep 30 # interrupted by the next renewal (within ~0.3 s)
        rescue Advlock::LeaseInterrupted => e
          interrupted = e
          raise
        end
        reached_end = true
      end
    end
    refute reached_end
    assert_operator now - started, :<, 5
    assert_kind_of Advlock::LeaseLost, interrupted
    assert_kind_of Advlock::LeaseLost, e
    assert_match(/returned false/, e.message)
    # A block that swallows the interruption still gets it at exit.
    assert_raises(Advlock::LeaseInterrupted) do
      Advlock.lease(pool, "report", "daily", ttl: 1.0, timeout: 1.0, interrupt: true) do
        release_all
        begin
          sleep 30
        rescue Advlock::LeaseInterrupted
          nil
        end
      end
    end
    sleep 0.05 # nothing is left pending for this thread
  end

  def test_s24_check_raises_at_the_renew_deadline_while_renewals_hang
    needs_leases!
    pool = TinyPool.new(1, "lease-pool")
    lease = nil
    assert_raises(Advlock::LeaseLost) do
      Advlock.lease(pool, "report", "daily", ttl: 0.6, timeout: 1.0, renew_deadline: 0.3) do |l|
        lease = l
        pool.with do # the renewal thread waits for the pool
          started = now
          e = assert_raises(Advlock::LeaseLost) do
            loop do
              l.check!
              sleep 0.005
            end
          end
          assert_match(/before the renew deadline \(300 ms/, e.message)
          assert_operator now - started, :<, 0.6 # at the deadline, though the renewal is still stuck
        end
      end
    end
    # Not released early (stopped at the renew deadline): it runs out on the server at its TTL.
    wait_until(5, "the lease to expire on the server") { row_of(lease.token).nil? }
  ensure
    pool&.close
  end

  def test_s24_block_stops_before_a_contender_is_granted
    needs_leases!
    admin.exec("DROP TABLE IF EXISTS lease_body_writes_rb")
    admin.exec("CREATE UNLOGGED TABLE lease_body_writes_rb (at timestamptz NOT NULL)")
    pool = TinyPool.new(1, "lease-pool")
    granted = nil
    contender = nil
    lease = nil
    with_conn("writer") do |writer|
      assert_raises(Advlock::LeaseLost) do
        Advlock.lease(pool, "report", "daily", ttl: 0.6, timeout: 1.0, interrupt: true) do |l|
          lease = l
          assert_equal 400, l.renew_deadline_ms
          contender = Thread.new do
            with_conn("contender") do |c|
              granted = c.exec("WITH l AS MATERIALIZED (SELECT advlock_lease('report', 'daily', 5000, 10000) AS id)" \
                               " SELECT id, extract(epoch FROM clock_timestamp()) FROM l").values.first
              c.exec_params("SELECT advlock_lease_release($1)", [granted[0]])
            end
          end
          pool.with do # renewals now wait for a connection that never comes
            loop do
              writer.exec("INSERT INTO lease_body_writes_rb VALUES (clock_timestamp())")
              sleep 0.002
            end
          end
        end
      end
    end
    contender.join
    last = admin.exec("SELECT extract(epoch FROM max(at)) FROM lease_body_writes_rb").getvalue(0, 0).to_f
    assert_operator granted[0].to_i, :>, lease.token
    margin = granted[1].to_f - last
    assert_operator margin, :>, 0, "the block wrote #{-margin * 1000} ms after the contender was granted"
    admin.exec("DROP TABLE lease_body_writes_rb")
  ensure
    pool&.close
  end

  FENCED = "UPDATE report_output_rb SET fence = $1, body = $2 WHERE id = 1 AND fence < $1"

  def test_s25_fenced_write_of_the_next_holder_wins_over_the_stale_one
    needs_leases!
    admin.exec("DROP TABLE IF EXISTS report_output_rb")
    admin.exec("CREATE TABLE report_output_rb (id int PRIMARY KEY, fence bigint NOT NULL, body text)")
    admin.exec("INSERT INTO report_output_rb VALUES (1, 0, NULL)")
    pa = TinyPool.new(2, "worker-a")
    pb = TinyPool.new(2, "worker-b")
    fresh_token = nil
    assert_raises(Advlock::LeaseLost) do
      Advlock.lease(pa, "report", "daily", ttl: 0.3, timeout: 1.0) do |stale|
        release_all # worker A "paused": its lease ends behind its back
        Advlock.lease(pb, "report", "daily", ttl: 2.0, timeout: 1.0) do |fresh|
          fresh_token = fresh.token
          assert_operator fresh.token, :>, stale.token
          assert_equal(1, pb.with { |c| c.exec_params(FENCED, [fresh.token, "b"]).cmd_tuples })
          # The stale worker's write changes nothing, whatever it believes.
          assert_equal(0, pa.with { |c| c.exec_params(FENCED, [stale.token, "a"]).cmd_tuples })
        end
      end
    end
    assert_equal [fresh_token.to_s, "b"], admin.exec("SELECT fence, body FROM report_output_rb").values.first
    admin.exec("DROP TABLE report_output_rb")
  ensure
    pa&.close
    pb&.close
  end

  def test_s26_timeout_raises_lease_timeout_naming_the_holder
    needs_leases!
    ph = TinyPool.new(1, "holder")
    pw = TinyPool.new(1, "waiter")
    Advlock.lease(ph, "report", "daily", ttl: 5.0, timeout: 0) do |held|
      started = now
      e = assert_raises(Advlock::LeaseTimeout) do
        Advlock.lease(pw, "report", "daily", ttl: 5.0, timeout: 0.2) { flunk "must not get the lease" }
      end
      assert_operator now - started, :>, 0.15
      assert_operator now - started, :<, 2
      assert_kind_of Advlock::LockTimeout, e
      assert_match(/within 200 ms: held by PID \d+ \(application_name "holder"\)/, e.message)
      assert_equal [row_of(held.token)[2], "holder"], [e.pid, e.application_name]
    end
  ensure
    ph&.close
    pw&.close
  end

  def test_s26_a_holder_without_application_name_is_named_so
    needs_leases!
    ph = TinyPool.new(1, "")
    pw = TinyPool.new(1, "waiter")
    Advlock.lease(ph, "report", "daily", ttl: 5.0, timeout: 0) do
      e = assert_raises(Advlock::LeaseTimeout) do
        Advlock.lease(pw, "report", "daily", ttl: 5.0, timeout: 0) { flunk "must not get the lease" }
      end
      assert_match(/held by PID \d+ \(no application_name\)\z/, e.message)
    end
  ensure
    ph&.close
    pw&.close
  end

  def test_s26_semaphore_slots
    needs_leases!
    pool = TinyPool.new(2, "lease-pool")
    Advlock.lease(pool, "reports", "running", ttl: 5.0, timeout: 0, slots: 2) do |one|
      Advlock.lease(pool, "reports", "running", ttl: 5.0, timeout: 0, slots: 2) do |two|
        refute_equal one.token, two.token
        e = assert_raises(Advlock::LeaseTimeout) do
          Advlock.lease(pool, "reports", "running", ttl: 5.0, timeout: 0, slots: 2) { flunk "third" }
        end
        assert_match(/\(2 slots\)/, e.message)
        assert_equal 2, e.holders.size
      end
    end
  ensure
    pool&.close
  end

  def test_s27_interrupted_wait_leaves_no_waiter
    needs_leases!
    ph = TinyPool.new(1, "holder")
    pw = TinyPool.new(1, "waiter")
    held_token = nil
    Advlock.lease(ph, "report", "daily", ttl: 10.0, timeout: 0) do |held|
      held_token = held.token
      t = Thread.new { Advlock.lease(pw, "report", "daily", ttl: 5.0, timeout: 30.0) { flunk "must not get it" } }
      wait_until(10, "the waiter to queue") { lease_rows(admin).any? { |r| !r[1] } }
      t.kill
      t.join
      wait_until(2, "the waiter row to go") { lease_rows(admin).none? { |r| !r[1] } }
      assert_equal [held.token], lease_rows(admin).map(&:first)
      assert_raises(Timeout::Error) do
        Timeout.timeout(0.3) { Advlock.lease(pw, "report", "daily", ttl: 5.0, timeout: 30.0) { flunk "no" } }
      end
      wait_until(2, "the waiter row to go") { lease_rows(admin).none? { |r| !r[1] } }
    end
    # The pool is still usable: the key is free now.
    Advlock.lease(pw, "report", "daily", ttl: 5.0, timeout: 1.0) { |l| assert_operator l.token, :>, held_token }
  ensure
    ph&.close
    pw&.close
  end

  def test_s28_waiting_lease_does_not_stall_create_index_concurrently
    needs_leases!
    admin.exec("DROP TABLE IF EXISTS cic_target_rb")
    admin.exec("CREATE TABLE cic_target_rb AS SELECT g AS id FROM generate_series(1, 1000) g")
    p1 = TinyPool.new(2, "lease-pod1")
    p2 = TinyPool.new(2, "lease-pod2")
    got = []
    took = nil
    pod2 = nil
    Advlock.lease(p1, "migrate", ttl: 30, timeout: 1) do
      pod2 = Thread.new { Advlock.lease(p2, "migrate", ttl: 30, timeout: 20) { |l| got << l.token } }
      row = wait_until(10, "pod 2 to wait in CALL advlock_wait_lease") do
        admin.exec("SELECT backend_xmin IS NULL FROM pg_stat_activity WHERE application_name = 'lease-pod2'" \
                   " AND state = 'active' AND query LIKE 'CALL %advlock_wait_lease%'").values.first
      end
      assert_equal ["t"], row
      with_conn("pod1-migration") do |migration|
        started = now
        migration.exec("CREATE INDEX CONCURRENTLY cic_target_rb_id ON cic_target_rb (id)")
        took = now - started
      end
    end
    pod2.join(30)
    admin.exec("DROP TABLE cic_target_rb")
    assert_operator took, :<, 5, "CREATE INDEX CONCURRENTLY took #{took} s"
    assert_equal 1, got.size
  ensure
    p1&.close
    p2&.close
  end

  # Holders take every slot of (ns, id) for `hold` seconds; a waiter asks lease(ttl: 3, timeout:
  # 10) meanwhile and runs its body for three TTLs, checking as it goes. [seconds waited, the
  # Lease, the errors its body or exit raised].
  def long_wait_then_kept(ns, slots:, hold:)
    holders = TinyPool.new(slots, "#{ns}-holder")
    waiters = TinyPool.new(2, "#{ns}-waiter")
    taken = Queue.new
    holding = Array.new(slots) do
      Thread.new do
        Advlock.lease(holders, ns, "daily", ttl: 30, timeout: 0, slots: slots) do
          taken << 1
          sleep hold
        end
      end
    end
    slots.times { taken.pop }
    asked = now
    waited = nil
    lease = nil
    errors = []
    begin
      Advlock.lease(waiters, ns, "daily", ttl: 3, timeout: 10, slots: slots) do |l|
        lease = l
        waited = now - asked
        until now - asked - waited > 9 # three TTLs
          l.check!
          sleep 0.05
        end
      end
    rescue StandardError => e
      errors << e
    end
    [waited, lease, errors]
  ensure
    holding&.each(&:join)
    holders&.close
    waiters&.close
  end

  def test_s40_lease_and_slot_granted_after_a_long_wait_are_kept
    needs_leases!
    results = [["s40-lease", 1], ["s40-slots", 2]].map do |ns, slots|
      Thread.new { long_wait_then_kept(ns, slots: slots, hold: 2.5) }
    end.map(&:value)
    results.each do |waited, lease, errors|
      assert_empty errors, errors.map(&:message).join("; ")
      assert_operator waited, :>, 2.3 # granted after more than 2/3 of its TTL
      assert_nil lease.lost
      assert_operator lease.renewals, :>=, 9 # every renewal returned true (one false: lost)
      assert_nil row_of(lease.token)
    end
  end

  def test_s29_leases_unavailable_say_why
    pool = TinyPool.new(1, "lease-pool")
    case server_kind
    when "extension"
      e = assert_raises(Advlock::NotPreloaded) { Advlock.lease(pool, "report", ttl: 30, timeout: 1) { flunk "ran" } }
      assert_match(/add advlock to shared_preload_libraries/, e.message)
      assert_kind_of Advlock::LeasesUnavailable, e
      assert_equal "55000", Advlock::SQL.sqlstate(e.cause)
    when "edition"
      e = assert_raises(Advlock::LeasesUnavailable) { Advlock.lease(pool, "report", ttl: 30, timeout: 1) { flunk } }
      assert_match(/the SQL edition has none/, e.message)
    else
      skip "leases work on this server (the preloaded one): checked on the other two"
    end
  ensure
    pool&.close
  end

  def test_s30_wrong_sources_name_what_to_pass
    with_conn do |conn|
      e = assert_raises(TypeError) { Advlock.lease(conn, "report", ttl: 30, timeout: 1) { flunk "ran" } }
      assert_match(/\Asource: pass a pool .*not a connection/, e.message)
    end
    active_record!
    e = assert_raises(TypeError) { Advlock.lease(ActiveRecord::Base.connection, "report", ttl: 30, timeout: 1) { nil } }
    assert_match(/\Asource: pass a pool/, e.message)
    e = assert_raises(TypeError) { Advlock.lease(DSN, "report", ttl: 30, timeout: 1) { flunk "ran" } }
    assert_match(/\Asource: expected a connection pool/, e.message)
  end
end
