# frozen_string_literal: true

require_relative "test_helper"
require "tempfile"
require "uri"

# advlock in a schema that is not on search_path, as the SQL edition's docs install it: the
# client finds the schema once per connection (or takes schema:) and qualifies every function
# and view; a database without advlock is a clear error naming the fix. Run for the extension
# (CREATE EXTENSION advlock SCHEMA advlock) and the SQL edition (installed into schema advlock),
# in databases of their own on the suite's server.
class SchemaTest < AdvlockCase
  EDITION = File.join(REPO, "edition/advlock_sql.sql")

  def fresh_database(kind)
    name = "advlock_ruby_schema_#{kind}"
    with_conn("schema-setup") do |c|
      c.exec("DROP DATABASE IF EXISTS #{name} WITH (FORCE)")
      c.exec("CREATE DATABASE #{name}")
    end
    with_conn("schema-setup", dsn: dsn_of(name)) do |c|
      case kind
      when "extension"
        c.exec("CREATE SCHEMA advlock")
        c.exec("CREATE EXTENSION advlock SCHEMA advlock")
      when "edition"
        c.exec("CREATE SCHEMA advlock")
        c.exec("SET search_path = advlock")
        c.exec(File.read(EDITION))
      end
    end
    dsn_of(name)
  end

  def drop_database(dsn)
    with_conn("schema-teardown") { |c| c.exec("DROP DATABASE #{URI.parse(dsn).path.delete_prefix('/')} WITH (FORCE)") }
  end

  def off_path(kind)
    dsn = fresh_database(kind)
    # Not on search_path: a bare advlock_key() is unknown here.
    with_conn(dsn: dsn) { |c| assert_equal "t", c.exec("SELECT to_regproc('advlock_key') IS NULL").getvalue(0, 0) }
    yield dsn
  ensure
    drop_database(dsn) if dsn
  end

  def test_s31_every_helper_works_with_advlock_off_search_path
    %w[extension edition].each do |kind|
      off_path(kind) do |dsn|
        with_conn(dsn: dsn) do |conn|
          conn.transaction do
            Advlock.lock(conn, "account", 42, timeout: 1)
            assert_equal [Advlock.key("account", 42)], Advlock.holders(conn).map(&:key)
            assert Advlock.try_lock(conn, "account", 43)
            Advlock.lock_all(conn, "account", [1, 2], timeout: 1)
            assert_equal 1, Advlock.holders(conn, "account", 43).size
          end
        end
        Advlock.session_lock(dsn, "migrate", timeout: 1) do |held|
          assert_operator held.token, :>, 0
          assert held.holding?
        end
        active_record!(dsn: dsn)
        ActiveRecord::Base.transaction { Advlock.with_lock("account", 44, timeout: 1) { :ok } }
        ActiveRecord::Base.remove_connection
      end
    end
  end

  # How many statements the block sent on conn, read from libpq's protocol trace.
  def statements(conn)
    Tempfile.create("advlock-trace") do |trace|
      conn.trace(trace)
      begin
        yield
      ensure
        conn.untrace
      end
      trace.flush
      File.readlines(trace.path).count { |line| line.match?(/\bF\b.*\b(Parse|Query)\b/) }
    end
  end

  def test_s31_schema_argument_and_the_lookup_once_per_connection
    off_path("extension") do |dsn|
      with_conn(dsn: dsn) do |conn|
        conn.transaction do
          assert Advlock.try_lock(conn, "account", 1, schema: "advlock")
          assert_raises(PG::InvalidSchemaName) { Advlock.try_lock(conn, "account", 2, schema: "no_such_schema") }
        end
        # The schema lookup at the first use of a connection only, then the lock's statement alone.
        sent = (1..3).map { |i| statements(conn) { conn.transaction { Advlock.try_lock(conn, "account", i) } } }
        assert_equal [4, 3, 3], sent # BEGIN, (lookup,) the lock, COMMIT
      end
    end
  end

  def test_s31_lease_and_session_lock_off_search_path
    skip LEASES_SKIP[server_kind] unless server_kind == "preloaded"
    off_path("extension") do |dsn|
      pool = active_record!(dsn: dsn, pool: 2)
      Advlock.lease(pool, "report", "daily", ttl: 5, timeout: 1) { |l| assert_operator l.token, :>, 0 }
      Advlock.lease(pool, "report", "daily", ttl: 5, timeout: 1, schema: "advlock") do |l|
        assert_operator l.token, :>, 0
      end
      Advlock.session_lock(dsn, "migrate", timeout: 1, schema: "advlock") { |held| assert held.holding? }
    ensure
      ActiveRecord::Base.remove_connection
    end
  end

  def test_s32_a_database_without_advlock_names_the_fix
    dsn = fresh_database("none")
    with_conn(dsn: dsn) do |conn|
      conn.transaction do
        e = assert_raises(Advlock::NotInstalled) { Advlock.try_lock(conn, "account", 1) }
        assert_match(/CREATE EXTENSION advlock.*or pass schema:/, e.message)
      end
    end
    e = assert_raises(Advlock::NotInstalled) { Advlock.session_lock(dsn, "migrate", timeout: 1) { flunk "ran" } }
    assert_match(/advlock_ruby_schema_none/, e.message)
  ensure
    drop_database(dsn) if dsn
  end
end
