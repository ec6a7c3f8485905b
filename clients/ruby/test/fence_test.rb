# frozen_string_literal: true

require_relative "test_helper"

# Advlock.fence and Advlock.lease_check inside the write's transaction: a stale token is refused
# there (FenceRefused, LK001) and the write rolls back with it; lease_check raises LeaseNotHeld
# (LK002) once the lease has ended. Fences work with the extension and the SQL edition.
class FenceTest < AdvlockCase
  def setup
    admin.exec("DROP TABLE IF EXISTS fenced_report_rb")
    admin.exec("CREATE TABLE fenced_report_rb (id int PRIMARY KEY, body text)")
    admin.exec("INSERT INTO fenced_report_rb VALUES (1, 'initial')")
    admin.exec("SELECT advlock_fence_reset('report', 'daily')")
  end

  def teardown
    admin.exec("DROP TABLE IF EXISTS fenced_report_rb")
    admin.exec("SELECT advlock_fence_reset('report', 'daily')")
    ActiveRecord::Base.remove_connection
    super
  end

  def write(conn, token, body)
    conn.transaction do
      Advlock.fence(conn, "report", "daily", token: token)
      conn.exec_params("UPDATE fenced_report_rb SET body = $1 WHERE id = 1", [body])
    end
  end

  def body
    admin.exec("SELECT body FROM fenced_report_rb").getvalue(0, 0)
  end

  def test_s39_a_stale_token_is_refused_inside_the_write_transaction
    with_conn("writer") do |conn|
      write(conn, 41, "by 41")
      write(conn, 42, "by 42")
      write(conn, 42, "by 42 again") # the same token passes again (a retry)
      e = assert_raises(Advlock::FenceRefused) { write(conn, 41, "stale") }
      assert_match(/refused token 41: token 42 has passed it/, e.message)
      assert_equal [41, 42], [e.token, e.passed]
      assert_match(/Token 42 passed it at/, e.detail)
      assert_equal "LK001", Advlock::SQL.sqlstate(e.cause)
      assert_equal PG::PQTRANS_IDLE, conn.transaction_status # rolled back, usable
    end
    assert_equal "by 42 again", body
  end

  def test_s39_fence_in_an_active_record_transaction
    active_record!
    db = ActiveRecord::Base.connection
    db.transaction do
      Advlock.fence(db, "report", "daily", token: 7)
      db.execute("UPDATE fenced_report_rb SET body = 'by 7' WHERE id = 1")
    end
    assert_raises(Advlock::FenceRefused) do
      db.transaction do
        Advlock.fence(db, "report", "daily", token: 6)
        db.execute("UPDATE fenced_report_rb SET body = 'stale' WHERE id = 1")
      end
    end
    assert_equal "by 7", body
  end

  def test_s02_s39_fence_needs_a_transaction_and_checks_its_arguments
    with_conn do |conn|
      e = assert_raises(Advlock::NotInTransaction) { Advlock.fence(conn, "report", "daily", token: 1) }
      assert_match(/records its token with the write transaction, but no transaction is open/, e.message)
      [[0, ArgumentError], [2**63, ArgumentError], [true, TypeError], ["7", TypeError], [nil, TypeError]]
        .each do |bad, error|
        e = assert_raises(error) { Advlock.fence(conn, "report", "daily", token: bad) }
        assert_match(/\Atoken/, e.message)
      end
      e = assert_raises(TypeError) { Advlock.lease_check(conn, "7") }
      assert_match(/\Alease/, e.message)
    end
  end

  def test_s39_lease_check_in_the_write_transaction
    pool = TinyPool.new(2, "lease-pool")
    unless server_kind == "preloaded"
      expected = { "extension" => Advlock::NotPreloaded, "edition" => Advlock::LeasesUnavailable }[server_kind]
      pool.with { |c| assert_raises(expected) { c.transaction { Advlock.lease_check(c, 1) } } }
      return
    end
    token = Advlock.lease(pool, "report", "daily", ttl: 5, timeout: 1) do |lease|
      with_conn("writer") do |conn|
        conn.transaction do
          Advlock.lease_check(conn, lease.token)
          Advlock.fence(conn, "report", "daily", token: lease.token)
          conn.exec("UPDATE fenced_report_rb SET body = 'leased' WHERE id = 1")
        end
      end
      lease.token
    end
    with_conn("late-writer") do |conn|
      e = assert_raises(Advlock::LeaseNotHeld) do
        conn.transaction do
          Advlock.lease_check(conn, token)
          conn.exec("UPDATE fenced_report_rb SET body = 'late' WHERE id = 1")
        end
      end
      assert_match(/lease #{token} is not held/, e.message)
      assert_kind_of Advlock::LeaseLost, e
      assert_equal "LK002", Advlock::SQL.sqlstate(e.cause)
    end
    assert_equal "leased", body
  ensure
    pool&.close
  end
end
