# frozen_string_literal: true

# Shared helpers: a real PostgreSQL with advlock, named by ADVLOCK_RB_DSN (set by
# clients/ruby/run_tests.sh). Every assertion about locks reads pg_locks. Each test is named by
# the scenario ids of clients/SCENARIOS.md it proves (test_s05_...).
$LOAD_PATH.unshift File.expand_path("../lib", __dir__)
require "minitest/autorun"
require "json"
require "timeout"
require "active_record"
require "advlock"

module AdvlockTest
  DSN = ENV.fetch("ADVLOCK_RB_DSN", "postgresql://postgres@127.0.0.1:5433/advlock_ruby")
  REPO = File.expand_path("../../..", __dir__)

  module_function

  # statement_timeout guards the suite against a hang; advlock never relies on it.
  def connect(app = "advlock-test", dsn: DSN)
    PG.connect(dsn, application_name: app, options: "-c statement_timeout=20000 -c client_min_messages=warning")
  end

  def with_conn(app = "advlock-test", dsn: DSN)
    conn = connect(app, dsn: dsn)
    yield conn
  ensure
    conn&.close
  end

  # [pid, granted, mode, key] of every advisory lock entry in this database, optionally of one pid.
  def advisory_locks(admin, pid = nil)
    admin.exec_params(
      "SELECT pid, granted, mode, (classid::int8 << 32) | objid::int8 FROM pg_locks WHERE locktype = 'advisory'" \
      " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())" \
      " AND ($1::int IS NULL OR pid = $1::int) ORDER BY pid", [pid]
    ).values.map { |p, g, m, k| [p.to_i, g == "t", m, k.to_i] }
  end

  def waiting?(admin, pid)
    advisory_locks(admin, pid).any? { |_, granted, _, _| !granted }
  end

  def backends(admin, app)
    admin.exec_params("SELECT pid FROM pg_stat_activity WHERE application_name = $1", [app]).values.flatten.map(&:to_i)
  end

  def wait_until(seconds = 10.0, what = "condition")
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + seconds
    loop do
      value = yield
      return value if value
      raise Minitest::Assertion, "timed out after #{seconds}s waiting for #{what}" if
        Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline

      sleep 0.01
    end
  end

  def now
    Process.clock_gettime(Process::CLOCK_MONOTONIC)
  end

  # "preloaded" (leases work), "extension" (advlock installed, not preloaded) or "edition".
  def server_kind
    @server_kind ||= with_conn("advlock-test-kind") do |c|
      ext, pre = c.exec(
        "SELECT EXISTS (SELECT FROM pg_extension WHERE extname = 'advlock'), 'advlock' = ANY " \
        "(string_to_array(replace(current_setting('shared_preload_libraries'), ' ', ''), ','))"
      ).values.first
      if ext == "t"
        pre == "t" ? "preloaded" : "extension"
      else
        "edition"
      end
    end
  end

  LEASES_SKIP = {
    "extension" => "leases need advlock in shared_preload_libraries; this server has the extension without it " \
                   "(run_tests.sh runs them on its preloaded instance)",
    "edition" => "the SQL edition has no leases (they live in advlock's shared memory)"
  }.freeze

  # [lease, granted, pid] of every row of advlock_leases.
  def lease_rows(admin)
    admin.exec("SELECT lease, granted, pid FROM advlock_leases ORDER BY lease").values
         .map { |l, g, p| [l.to_i, g == "t", p&.to_i] }
  end

  def dsn_of(database)
    DSN.sub(%r{/[^/?]*(\?|\z)}) { "/#{database}#{Regexp.last_match(1)}" }
  end

  # ActiveRecord's default pool on the suite's database.
  def active_record!(pool: 5, dsn: DSN)
    ActiveRecord::Base.establish_connection("#{dsn.sub(/\Apostgres(ql)?:/, 'postgresql:')}?pool=#{pool}")
    ActiveRecord::Base.connection_pool
  end
end

# The smallest pool with #with(timeout:) (the connection_pool gem's protocol).
class TinyPool
  def initialize(size, app, dsn: AdvlockTest::DSN)
    @all = Array.new(size) { PG.connect(dsn, application_name: app) }
    @free = Queue.new
    @all.each { |c| @free << c }
  end

  def with(timeout: 5)
    conn = pop(timeout)
    begin
      yield conn
    ensure
      @free << conn
    end
  end

  def pop(timeout)
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout
    loop do
      return @free.pop(true)
    rescue ThreadError
      if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
        raise Timeout::Error,
              "no connection within #{timeout} s"
      end

      sleep 0.005
    end
  end

  def take
    pop(5)
  end

  def give(conn)
    @free << conn
  end

  def close
    @all.each(&:close)
  end
end

# The base of every test: the admin connection, and the check that nothing is left behind.
class AdvlockCase < Minitest::Test
  include AdvlockTest

  def admin
    @admin ||= connect("advlock-test-admin")
  end

  def needs_leases!
    skip LEASES_SKIP[server_kind] unless server_kind == "preloaded"
  end

  def needs_snapshot_free_wait!
    skip "the SQL edition has no snapshot-free wait (CALL advlock_wait_lock)" if server_kind == "edition"
  end

  # Every test must leave no advisory lock and no lease behind (a leak would be a bug).
  def teardown
    with_conn("advlock-test-check") do |c|
      wait_until(5.0, "#{name} to leave no advisory lock") { advisory_locks(c).empty? }
      wait_until(5.0, "#{name} to leave no lease") { lease_rows(c).empty? } if server_kind == "preloaded"
    end
  ensure
    @admin&.close
    super
  end
end
