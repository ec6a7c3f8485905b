# frozen_string_literal: true

require_relative "test_helper"
require "etc"
require "open3"
require "socket"
require "uri"

# Across a server restart (S45: a lease and a leader keep renewing, on fresh pooled
# connections, the same ids) and with a multi-host DSN whose first host is down (S46).
class FailoverTest < AdvlockCase
  # The preloaded instance's directory and binaries, exported by run_tests.sh for its
  # preloaded run only: the one server this suite may restart.
  PRE_DIR = ENV.fetch("ADVLOCK_RB_PRE_DIR", nil)
  PGBIN = ENV.fetch("ADVLOCK_RB_PGBIN", nil)

  def teardown
    ActiveRecord::Base.remove_connection
    super
  end

  def live_port
    URI.parse(DSN).port
  end

  # A port in the suite's range (5630-5649) that nobody listens on: the multi-host DSN's
  # first host, down.
  def dead_port
    @dead_port ||= (5630..5649).find do |p|
      next false if p == live_port

      TCPSocket.new("127.0.0.1", p).close
      false
    rescue SystemCallError
      true
    end || skip("no free port in 5630-5649 for a host that is down")
  end

  def database
    URI.parse(DSN).path.delete_prefix("/")
  end

  def multi_host_conninfo
    "host=127.0.0.1,127.0.0.1 port=#{dead_port},#{live_port} dbname=#{database} user=postgres " \
      "target_session_attrs=read-write"
  end

  def multi_host_uri
    "postgresql://postgres@127.0.0.1:#{dead_port},127.0.0.1:#{live_port}/#{database}" \
      "?target_session_attrs=read-write"
  end

  # pg_ctl restart -m fast, as the postgres OS user (the server refuses root); returns once the
  # server accepts connections again (-w).
  def restart_server!
    pg_ctl = ["#{PGBIN}/pg_ctl", "-D", "#{PRE_DIR}/data", "-l", "#{PRE_DIR}/postgres.log", "-m", "fast", "-w",
              "-t", "60", "restart"]
    pg_ctl = ["sudo", "-u", "postgres", "--", *pg_ctl] unless Etc.getpwuid.name == "postgres"
    out, status = Open3.capture2e(*pg_ctl)
    assert status.success?, "pg_ctl restart failed: #{out}"
    wait_until(30, "the restarted server to answer") do
      with_conn("advlock-test-s45-up") { |c| c.exec("SELECT 1").getvalue(0, 0) == "1" }
    rescue PG::Error
      false
    end
  end

  def started_at
    with_conn("advlock-test-s45-admin") { |c| c.exec("SELECT pg_postmaster_start_time()").getvalue(0, 0) }
  end

  def test_s45_lease_and_leader_ride_through_a_restart
    needs_leases!
    skip "only run_tests.sh's preloaded run may restart its server (ADVLOCK_RB_PRE_DIR)" unless PRE_DIR && PGBIN
    skip "ADVLOCK_RB_DSN is not the preloaded instance run_tests.sh started" unless
      File.read("#{PRE_DIR}/data/postgresql.conf").include?("port = #{live_port}\n")

    # The lease on ActiveRecord's pool (which verifies a connection at checkout), the leader on
    # a pool of plain PG::Connections (which hands out whatever it holds): both are renewed on
    # fresh connections after the restart.
    ar_pool = active_record!(pool: 2)
    tiny = TinyPool.new(2, "advlock-test-s45-leader")
    before = started_at
    Advlock.lease(ar_pool, "s45", "lease", ttl: 6, timeout: 0, interrupt: true) do |lease|
      Advlock.leader(tiny, "s45", "leader", candidate: "s45", ttl: 6, timeout: 0, interrupt: true) do |lead|
        renewals = [lease.renewals, lead.renewals]
        restart_server!
        refute_equal before, started_at, "the server did not restart"
        wait_until(10, "a renewal of the lease and of the term after the restart") do
          lease.renewals >= renewals[0] + 2 && lead.renewals >= renewals[1] + 2
        end
        assert_nil lease.lost
        assert_nil lead.lost
        lease.check!
        lead.check!
        rows = with_conn("advlock-test-s45-admin") { |c| lease_rows(c) }
        held = rows.select { |_, granted, _| granted }
        assert_equal [lease.token, lead.term].sort, held.map(&:first).sort
        # pid is 0 after a restart until the holder renews: these were renewed on the new server.
        assert(held.all? { |_, _, pid| pid.to_i.positive? }, held.inspect)
      end
    end
  ensure
    tiny&.close
  end

  def test_s46_session_lock_on_a_multi_host_dsn_first_host_down
    [multi_host_conninfo, multi_host_uri].each do |dsn|
      Advlock.session_lock(dsn, "s46", "session", timeout: 0, application_name: "advlock-test-s46") do |held|
        # admin is on the live server: the lock is taken there, by the lock's backend.
        assert(advisory_locks(admin, held.pid).any? { |_, granted, _, _| granted }, dsn)
      end
    end
  end

  def test_s46_pools_on_a_multi_host_dsn_first_host_down
    ar_pool = ActiveRecord::Base.establish_connection(
      adapter: "postgresql", host: "127.0.0.1,127.0.0.1", port: "#{dead_port},#{live_port}", database: database,
      username: "postgres", target_session_attrs: "read-write", pool: 2
    )
    ar_pool.with_connection do |c|
      ActiveRecord::Base.transaction do
        Advlock.lock(c, "s46", "xact", timeout: 0)
        pid = c.raw_connection.backend_pid
        assert(advisory_locks(admin, pid).any? { |_, granted, _, _| granted })
      end
    end
    return if server_kind != "preloaded"

    tiny = TinyPool.new(1, "advlock-test-s46", dsn: multi_host_uri)
    [ar_pool, tiny].each do |pool|
      Advlock.lease(pool, "s46", "lease", ttl: 6, timeout: 0) do |lease|
        assert_equal([[lease.token, true]], lease_rows(admin).map { |l, granted, _| [l, granted] })
      end
    end
  ensure
    tiny&.close
  end
end
