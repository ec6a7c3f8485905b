# frozen_string_literal: true

require "etc"
require "socket"
require "tmpdir"
require "uri"

# A real PgBouncer in front of the test instance, in transaction, statement or session pooling
# mode, run as the postgres OS user (as pg_test/clients does), stopped at the end.
module Bouncer
  PGBOUNCER = ["/usr/sbin/pgbouncer", "/usr/bin/pgbouncer"].find { |p| File.executable?(p) } || "pgbouncer"

  module_function

  def free_port
    server = TCPServer.new("127.0.0.1", 0)
    server.addr[1]
  ensure
    server&.close
  end

  # Yields the DSN of `dsn`'s database through a PgBouncer in `mode`. Session mode keeps
  # PgBouncer's default server_reset_query (DISCARD ALL), as a deployment would.
  def run(dsn, mode, pool_size: 2)
    target = URI.parse(dsn)
    dbname = target.path.delete_prefix("/")
    port = free_port
    postgres = Etc.getpwnam("postgres")
    dir = Dir.mktmpdir("advlock-rb-pgbouncer-#{mode}.")
    File.chmod(0o755, dir)
    userlist = File.join(dir, "userlist.txt")
    ini = File.join(dir, "pgbouncer.ini")
    File.write(userlist, %("postgres" ""\n))
    File.write(ini, <<~INI)
      [databases]
      #{dbname} = host=#{target.host} port=#{target.port} dbname=#{dbname}

      [pgbouncer]
      listen_addr = 127.0.0.1
      listen_port = #{port}
      unix_socket_dir =
      auth_type = trust
      auth_file = #{userlist}
      pool_mode = #{mode}
      default_pool_size = #{pool_size}
      min_pool_size = 0
      reserve_pool_size = 0
      max_client_conn = 100
      ignore_startup_parameters = extra_float_digits,options
      logfile = #{dir}/pgbouncer.log
      pidfile = #{dir}/pgbouncer.pid
    INI
    [dir, userlist, ini].each { |p| File.chown(postgres.uid, postgres.gid, p) }
    cmd = [PGBOUNCER, ini]
    cmd = ["sudo", "-n", "-u", "postgres", "--", *cmd] if Process.euid != postgres.uid
    pid = Process.spawn(*cmd, out: File::NULL, err: File::NULL, in: File::NULL)
    through = "postgresql://#{target.user || 'postgres'}@127.0.0.1:#{port}/#{dbname}"
    wait_ready(through, pid, dir)
    yield through
  ensure
    if pid
      begin
        Process.kill("TERM", pid) # sudo relays SIGTERM to pgbouncer
        Timeout.timeout(10) { Process.wait(pid) }
      rescue Errno::ESRCH, Errno::ECHILD
        nil
      rescue Timeout::Error
        Process.kill("KILL", pid)
        Process.wait(pid)
      end
    end
    FileUtils.rm_rf(dir) if dir
  end

  def wait_ready(through, pid, dir)
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 15
    loop do
      raise "pgbouncer exited: #{log(dir)}" if Process.wait(pid, Process::WNOHANG)

      begin
        PG.connect(through).tap { |c| c.exec("SELECT 1") }.close
        return
      rescue PG::Error
        raise "pgbouncer did not start: #{log(dir)}" if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline

        sleep 0.1
      end
    end
  end

  def log(dir)
    File.read(File.join(dir, "pgbouncer.log"))[-3000..] || ""
  rescue SystemCallError => e
    "(no log: #{e})"
  end
end
