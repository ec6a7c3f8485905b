# frozen_string_literal: true

require "open3"
require "timeout"

# A real PgBouncer in front of the test instance, in transaction, statement or session pooling
# mode, run as the postgres OS user and stopped at the end: started by the repository's one
# launcher, pg_test/pgbouncer_launcher.py (the Python and Node suites use it too), as a
# subprocess that prints PgBouncer's URL once a query goes through it and stops PgBouncer when
# its standard input closes.
module Bouncer
  LAUNCHER = File.expand_path("../../../pg_test/pgbouncer_launcher.py", __dir__)

  module_function

  # Yields the DSN of `dsn`'s database through a PgBouncer in `mode` with a pool of `pool_size`.
  # Session mode keeps PgBouncer's default server_reset_query (DISCARD ALL), as a deployment would.
  def run(dsn, mode, pool_size: 2)
    cmd = ["python3", LAUNCHER, "run", "--target", dsn, "--mode", mode, "--pool-size", pool_size.to_s,
           "--set", "min_pool_size=0", "--set", "ignore_startup_parameters=extra_float_digits,options",
           "--prefix", "advlock-rb-pgbouncer-#{mode}."]
    stdin, stdout, stderr, launcher = Open3.popen3(*cmd)
    through = stdout.gets&.chomp
    raise "pgbouncer did not start: #{stderr.read}" if through.nil? || through.empty?

    yield through
  ensure
    if launcher
      stdin.close # the launcher stops PgBouncer, removes its directory and exits
      begin
        Timeout.timeout(30) { launcher.join }
      rescue Timeout::Error
        Process.kill("KILL", launcher.pid)
        launcher.join
      end
      [stdout, stderr].each(&:close)
    end
  end
end
