# frozen_string_literal: true

require_relative "test_helper"

# Advlock.key is spec v1 (equal to the vectors and the server); bad arguments fail before any
# round trip, naming the argument.
class KeysTest < AdvlockCase
  VECTORS = JSON.parse(File.read(File.join(REPO, "pg_test/vectors/advlock_key_v1.json")))["vectors"]

  def id_of(vector)
    vector.key?("id_int") ? vector["id_int"] : vector["id"]
  end

  def test_s01_every_vector_without_a_server
    assert_operator VECTORS.size, :>=, 20
    VECTORS.each { |v| assert_equal v["key"], Advlock.key(v["ns"], id_of(v)), v.inspect }
  end

  def test_s01_every_vector_equals_the_server
    VECTORS.each do |v|
      sql = v.key?("id_int") ? "SELECT advlock_key($1::text, $2::int8)" : "SELECT advlock_key($1::text, $2::text)"
      sql = sql.gsub("advlock_key", "#{Advlock::SQL.prefix(admin, nil)}advlock_key")
      server = admin.exec_params(sql, [v["ns"], id_of(v)]).getvalue(0, 0).to_i
      assert_equal [v["key"], v["key"]], [server, Advlock.key(v["ns"], id_of(v))], v.inspect
    end
  end

  def test_s01_int_ids_hash_as_decimal_text
    assert_equal Advlock.key("account", "42"), Advlock.key("account", 42)
    assert_equal Advlock.key("account", "-7"), Advlock.key("account", -7)
    assert_equal Advlock.key("migrate", ""), Advlock.key("migrate")
    assert_equal 7_700_915_891_107_303_510, Advlock.key("account", 42)
  end

  BAD_KEYS = [
    ["", "x", ArgumentError, "ns"], [nil, "x", TypeError, "ns"], [:account, "x", TypeError, "ns"],
    ["account", true, TypeError, "id"], ["account", nil, TypeError, "id"], ["account", 4.2, TypeError, "id"],
    ["account", 2**63, ArgumentError, "id"], ["account", "a\0b", ArgumentError, "id"], ["a\0", "x", ArgumentError, "ns"]
  ].freeze

  def test_s02_key_bad_arguments_name_the_argument
    BAD_KEYS.each do |ns, id, error, name|
      e = assert_raises(error, [ns, id].inspect) { Advlock.key(ns, id) }
      assert_match(/\A#{name}\b/, e.message)
    end
  end

  # Each on a closed connection: any round trip would raise PG::ConnectionBad instead.
  BAD_CALLS = [
    [->(c) { Advlock.lock(c, "account", 42, timeout: -1) }, ArgumentError, "timeout"],
    [->(c) { Advlock.lock(c, "account", 42, timeout: Float::NAN) }, ArgumentError, "timeout"],
    [->(c) { Advlock.lock(c, "account", 42, timeout: Float::INFINITY) }, ArgumentError, "timeout"],
    [->(c) { Advlock.lock(c, "account", 42, timeout: true) }, TypeError, "timeout"],
    [->(c) { Advlock.lock(c, "account", 42, timeout: "2") }, TypeError, "timeout"],
    [->(c) { Advlock.lock(c, "account", 42, timeout: 3e6) }, ArgumentError, "timeout"],
    [->(c) { Advlock.lock(c, "", 42, timeout: 1) }, ArgumentError, "ns"],
    [->(c) { Advlock.lock(c, "account", true, timeout: 1) }, TypeError, "id"],
    [->(c) { Advlock.lock(c, "account", 42, timeout: 1, shared: "yes") }, TypeError, "shared"],
    [->(c) { Advlock.lock(c, "account", 42, timeout: 1, schema: "") }, ArgumentError, "schema"],
    [->(c) { Advlock.lock(c, "account", 42, timeout: 1, schema: :advlock) }, TypeError, "schema"],
    [->(c) { Advlock.try_lock(c, "account", nil) }, TypeError, "id"],
    [->(c) { Advlock.try_lock(c, "account", 1, timeout: -0.5) }, ArgumentError, "timeout"],
    [->(c) { Advlock.lock_all(c, "account", [], timeout: 1) }, ArgumentError, "ids"],
    [->(c) { Advlock.lock_all(c, "account", "42", timeout: 1) }, TypeError, "ids"],
    [->(c) { Advlock.lock_all(c, "account", [42, false], timeout: 1) }, TypeError, "ids element"],
    [->(c) { Advlock.holders(c, "", 1) }, ArgumentError, "ns"],
    [->(c) { Advlock.with_lock("account", 42, timeout: 1, connection: c) }, ArgumentError, "block"],
    [->(_) { Advlock.lock("postgresql://x/y", "account", 42, timeout: 1) }, TypeError, "conn"]
  ].freeze

  def test_s02_bad_arguments_before_any_round_trip
    conn = connect
    conn.close
    BAD_CALLS.each_with_index do |(call, error, name), i|
      e = assert_raises(error, "call #{i}") { call.call(conn) }
      assert_match(/\A#{name}\b/, e.message, "call #{i}")
    end
  end

  BAD_SESSIONS = [
    [{ timeout: -1 }, ArgumentError, "timeout"], [{ timeout: 1, id: true }, TypeError, "id"],
    [{ timeout: 1, ns: "" }, ArgumentError, "ns"], [{ timeout: 1, application_name: 7 }, TypeError, "application_name"],
    [{ timeout: 1, dsn: "host=/tmp port" }, ArgumentError, "dsn"],
    [{ timeout: 1, dsn: 42 }, TypeError, "dsn"], [{ timeout: 1, interrupt: 1 }, TypeError, "interrupt"]
  ].freeze

  def test_s02_s12_session_lock_bad_arguments_before_connecting
    BAD_SESSIONS.each do |kwargs, error, name|
      args = { dsn: "host=/nonexistent port=1", ns: "migrate", id: "" }.merge(kwargs)
      e = assert_raises(error, kwargs.inspect) do
        Advlock.session_lock(args.delete(:dsn), args.delete(:ns), args.delete(:id), **args) { flunk "ran" }
      end
      assert_match(/\A#{name}\b/, e.message)
    end
  end

  BAD_LEASES = [
    [{ ttl: 0, timeout: 1 }, ArgumentError, "ttl"], [{ ttl: -1, timeout: 1 }, ArgumentError, "ttl"],
    [{ ttl: Float::INFINITY, timeout: 1 }, ArgumentError, "ttl"], [{ ttl: "30", timeout: 1 }, TypeError, "ttl"],
    [{ ttl: 30, timeout: -1 }, ArgumentError, "timeout"], [{ ttl: 30, timeout: true }, TypeError, "timeout"],
    [{ ttl: 30, timeout: 1, slots: 0 }, ArgumentError, "slots"],
    [{ ttl: 30, timeout: 1, slots: true }, TypeError, "slots"],
    [{ ttl: 30, timeout: 1, slots: 2.0 }, TypeError, "slots"], [{ ttl: 30, timeout: 1, ns: "" }, ArgumentError, "ns"],
    [{ ttl: 30, timeout: 1, id: true }, TypeError, "id"],
    [{ ttl: 1, timeout: 1, renew_deadline: 0 }, ArgumentError, "renew_deadline"],
    [{ ttl: 1, timeout: 1, renew_deadline: 1.0 }, ArgumentError, "renew_deadline"],
    [{ ttl: 1, timeout: 1, renew_deadline: 2 }, ArgumentError, "renew_deadline"],
    [{ ttl: 1, timeout: 1, renew_deadline: -1 }, ArgumentError, "renew_deadline"],
    [{ ttl: 1, timeout: 1, interrupt: 1 }, TypeError, "interrupt"]
  ].freeze

  def test_s02_s24_lease_bad_arguments_before_any_round_trip
    # A pool that cannot connect: any round trip would fail with its own error.
    pool = ActiveRecord::ConnectionAdapters::ConnectionPool.new(
      ActiveRecord::ConnectionAdapters::PoolConfig.new(
        ActiveRecord::Base, ActiveRecord::DatabaseConfigurations::HashConfig.new(
                              "test", "primary", { adapter: "postgresql", host: "/nonexistent", port: 1 }
                            )
      )
    )
    BAD_LEASES.each do |kwargs, error, name|
      args = { ns: "report", id: "daily" }.merge(kwargs)
      e = assert_raises(error, kwargs.inspect) do
        Advlock.lease(pool, args.delete(:ns), args.delete(:id), **args) { flunk "ran" }
      end
      assert_match(/\A#{name}\b/, e.message)
      # 0 and a negative TTL alike: one message.
      assert_match(/\Attl must be a positive number/, e.message) if kwargs[:ttl].is_a?(Integer) && name == "ttl"
    end
  ensure
    pool&.disconnect!
  end
end
