# frozen_string_literal: true

require_relative "test_helper"
require_relative "bouncer"

# session_lock through real PgBouncers: refused in transaction and statement mode (where a
# session lock would be shared with other clients: two holders at once), working in session mode;
# behind any pooler the lock is held in a transaction block that keeps its server session.
class PoolerTest < AdvlockCase
  KEY = Advlock.key("migrate")

  def through(mode, &)
    Bouncer.run(DSN, mode, &)
  end

  def test_s17_transaction_and_statement_poolers_are_refused
    %w[transaction statement].each do |mode|
      through(mode) do |dsn|
        e = assert_raises(Advlock::UnsafePooler, mode) do
          Advlock.session_lock(dsn, "migrate", timeout: 1.0) { flunk "locked through a #{mode}-mode pooler" }
        end
        assert_match(/transaction or statement mode.*a pooler in session mode/, e.message)
        assert_empty advisory_locks(admin)
      end
    end
  end

  # Four threads released together, each taking session_lock(dsn, "migrate") `rounds` times and
  # staying inside `hold` seconds: each round's outcome ("held", "refused" for UnsafePooler, or
  # the inspect of any other error) and the most threads ever inside at once. With
  # check_holding, each holder asks holding? before leaving ("held" only when it said true).
  def race(dsn, rounds:, timeout:, hold:, check_holding:)
    inside = 0
    most = 0
    outcomes = Queue.new
    guard = Mutex.new
    gate = Queue.new
    threads = Array.new(4) do
      Thread.new do
        gate.pop
        rounds.times do
          holding = Advlock.session_lock(dsn, "migrate", timeout: timeout) do |held|
            guard.synchronize { most = [most, inside += 1].max }
            sleep hold
            guard.synchronize { inside -= 1 }
            check_holding ? held.holding? : true
          end
          outcomes << (holding ? "held" : "held, but holding? said false")
        rescue Advlock::UnsafePooler
          outcomes << "refused"
        rescue StandardError => e
          outcomes << e.inspect
        end
      end
    end
    4.times { gate << :go }
    threads.each { |t| t.join(120) }
    [Array.new(outcomes.size) { outcomes.pop }, most]
  end

  # The bug of the Python client 0.4.0: two threads both entered the block. With threads racing
  # through the pooler, no two are ever inside at once; the pooler is refused (whoever is not
  # refused got the lock on the server, alone, in the block that pins its server session, so it
  # never loses it) and nothing is left locked.
  def test_s17_two_holders_never_at_once_through_a_transaction_pooler
    through("transaction") do |dsn|
      seen, most = race(dsn, rounds: 3, timeout: 2.0, hold: 0.02, check_holding: false)
      assert_equal 12, seen.size, seen.inspect
      assert_operator most, :<=, 1, seen.inspect
      assert_includes seen, "refused"
      assert_empty(seen.reject { |o| %w[held refused].include?(o) })
      wait_until(10, "no advisory lock left behind") { advisory_locks(admin).empty? }
    end
  end

  # The probe answers nothing (nil), as when the pool is exhausted; the library's real probe
  # is put back afterwards.
  def without_probe
    probe = Advlock::HeldLock.instance_method(:probe_pid)
    Advlock::HeldLock.send(:define_method, :probe_pid) { nil }
    yield
  ensure
    Advlock::HeldLock.send(:define_method, :probe_pid, probe)
    Advlock::HeldLock.send(:private, :probe_pid)
  end

  # No probe is conclusive (a busy pool hands it another backend). Here the probe never answers,
  # so nothing refuses up front: threads take the lock through a transaction pooler, wait for it
  # and release it. The lock lives in the block that pins the server session, so none is ever
  # inside with another, none loses its lock, and none is stranded on a server session the pool
  # hands to the next client (0.5.0's first cut left it there when a statement landed on another
  # backend: every later session_lock timed out on a lock held by an idle server connection).
  # The block greets again and pins whichever backend it reached, so every round gets the lock.
  def test_s35_a_probe_that_misses_the_pooler_strands_no_lock
    through("transaction") do |dsn|
      seen, most = without_probe { race(dsn, rounds: 5, timeout: 5.0, hold: 0.01, check_holding: true) }
      # Every round held: the block's backend never holds another client's lock (a pinned lock
      # keeps its server session out of the pool), so nothing refuses, and none is lost.
      assert_equal ["held"] * 20, seen
      assert_equal 1, most
      wait_until(5, "no advisory lock stranded on a pooled server session") { advisory_locks(admin).empty? }
    end
  end

  # Named prepared statements on the server sessions behind the pooler, as seen through it: each
  # query lands on whichever server session is free, so ask a few times.
  def prepared_behind(dsn)
    with_conn("s43-check", dsn: dsn) do |c|
      Array.new(6) { c.exec("SELECT name FROM pg_prepared_statements").values.flatten }.flatten.uniq
    end
  end

  def locks_on_one_connection(conn, calls)
    calls.times { |i| conn.transaction { Advlock.lock(conn, "s43", i, timeout: 1) } }
    conn.transaction do
      assert Advlock.try_lock(conn, "s43", "try")
      assert_equal [true], Advlock.holders(conn, "s43", "try").map(&:granted)
    end
  end

  # A model of the application's own, for its queries ActiveRecord prepares.
  class Account < ActiveRecord::Base
    self.table_name = "s43_accounts_rb"
  end

  # ActiveRecord finds on one connection through `dsn` while another client keeps a server session
  # busy every other time (so the pooler hands the finds different server sessions): the errors.
  def finds_through(dsn, prepared_statements:)
    ActiveRecord::Base.establish_connection("#{dsn}?pool=2&prepared_statements=#{prepared_statements}")
    with_conn("s43-other", dsn: dsn) do |other|
      Array.new(20) do |i|
        busy = Thread.new { other.exec("SELECT pg_sleep(0.02)") } if i.odd?
        Account.find(i + 1)
        nil
      rescue ActiveRecord::StatementInvalid => e
        e.message.lines.first
      ensure
        busy&.join
      end.compact
    end
  ensure
    ActiveRecord::Base.remove_connection
  end

  # What the README says of the application's own driver settings behind PgBouncer < 1.21:
  # ActiveRecord's default prepared_statements (true) makes its own model queries fail through a
  # transaction-mode pooler; prepared_statements=false makes them pass. advlock's calls pass
  # either way (test_s43_nothing_prepared_behind_a_transaction_pooler).
  def test_s43_the_applications_own_prepared_statements_need_prepared_statements_false
    admin.exec("DROP TABLE IF EXISTS s43_accounts_rb")
    admin.exec("CREATE TABLE s43_accounts_rb AS SELECT g AS id FROM generate_series(1, 20) g")
    admin.exec("ALTER TABLE s43_accounts_rb ADD PRIMARY KEY (id)")
    through("transaction") do |dsn|
      failed = finds_through(dsn, prepared_statements: true)
      refute_empty failed, "ActiveRecord's prepared finds all passed through PgBouncer in transaction mode"
      assert_match(/prepared statement "a\d+" does not exist/, failed.first)
      assert_empty finds_through(dsn, prepared_statements: false)
    end
  ensure
    admin.exec("DROP TABLE IF EXISTS s43_accounts_rb")
  end

  # advlock's own statements are unnamed (ruby-pg exec_params), so PgBouncer 1.18 in transaction
  # mode (which cannot carry a named prepared statement from one transaction to the next) carries
  # them with every driver default: 100 transactions on one PG::Connection, the same on
  # ActiveRecord with its default prepared_statements (true: its own queries with binds would be
  # prepared, advlock's never are), and a lease renewed 100 times on a pool through it.
  def test_s43_nothing_prepared_behind_a_transaction_pooler
    through("transaction") do |dsn|
      with_conn("s43", dsn: dsn) { |conn| locks_on_one_connection(conn, 100) }
      active_record!(dsn: dsn)
      db = ActiveRecord::Base.connection
      assert db.prepared_statements # ActiveRecord's default
      100.times { |i| db.transaction { Advlock.with_lock("s43", i, timeout: 1) { nil } } }
      db.transaction do
        assert Advlock.try_lock(db, "s43", "try")
        assert_equal 1, Advlock.holders(db, "s43", "try").size
      end
      assert_empty prepared_behind(dsn)
      next unless server_kind == "preloaded"

      # A lease on ActiveRecord's pool through it, its default prepared_statements still on.
      lease = Advlock.lease(ActiveRecord::Base.connection_pool, "s43", "lease", ttl: 0.45, timeout: 1) do |l|
        wait_until(30, "100 renewals") { l.check! || l.renewals >= 100 }
        l
      end
      assert_nil lease.lost
      assert_empty prepared_behind(dsn)
    ensure
      ActiveRecord::Base.remove_connection # while the pooler still runs
    end
  ensure
    ActiveRecord::Base.remove_connection
  end

  def test_s18_session_pooler_works_and_reports_the_server_backend
    through("session") do |dsn|
      seen = Advlock.session_lock(dsn, "migrate", timeout: 1.0) do |held|
        assert held.holding?
        # held.pid is the server backend (pg_backend_pid()), not the pooler's made-up pid.
        [held.pid, advisory_locks(admin, held.pid)]
      end
      assert_equal [[seen[0], true, "ExclusiveLock", KEY]], seen[1]
      assert_empty advisory_locks(admin)
    end
  end

  def test_s18_session_pooler_keeps_mutual_exclusion
    through("session") do |dsn|
      Advlock.session_lock(dsn, "migrate", timeout: 1.0, application_name: "first") do |first|
        e = assert_raises(Advlock::LockTimeout) do
          Advlock.session_lock(dsn, "migrate", timeout: 0.3) { flunk "two holders at once" }
        end
        assert_match(/within 300 ms: held by PID \d+/, e.message)
        assert_equal first.pid, e.pid
      end
      wait_until(5, "the lock to be released") { advisory_locks(admin).empty? }
    end
  end
end
