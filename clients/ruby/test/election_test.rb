# frozen_string_literal: true

require_relative "test_helper"

# Advlock.leader and Advlock.observe on the extension's election (preloaded only): a follower
# elected after a long campaign wait leads while it renews, an observer wakes on each change,
# a leader that leaves its block hands over at once; servers without elections say why.
class ElectionTest < AdvlockCase
  def leader_now(ns, id)
    admin.exec_params("SELECT term, candidate FROM advlock_leader($1, $2)", [ns, id]).values.first
         &.then { |t, c| [t.to_i, c] }
  end

  def test_s36_follower_elected_after_a_long_campaign_wait_leads_while_renewing
    needs_leases!
    pool = TinyPool.new(3, "s36")
    elected = Queue.new
    sitting = Thread.new do
      Advlock.leader(pool, "beat", "s36", candidate: "pod-a", ttl: 1.5, timeout: 0) do |a|
        elected << a.term
        sleep 1.2 # more than 2/3 of the TTL: then resigns (leaves the block)
      end
    end
    a_term = elected.pop
    asked = now
    runs = 0
    terms = []
    b = Advlock.leader(pool, "beat", "s36", candidate: "pod-b", ttl: 1.5, timeout: 10) do |l|
      runs += 1
      waited = now - asked
      assert_operator waited, :>, 1.0, "elected after #{waited} s: the campaign did not wait long"
      until now - asked - waited > 4.5 # three TTLs
        l.check!
        terms << leader_now("beat", "s36")
        sleep 0.1
      end
      l
    end
    sitting.join
    assert_equal 1, runs # the block ran once
    assert_nil b.lost
    assert_operator b.term, :>, a_term
    assert_equal [[b.term, "pod-b"]], terms.uniq # one term all along, never lost
    assert_operator b.renewals, :>=, 9
    assert_nil leader_now("beat", "s36") # resigned at the end
  ensure
    pool&.close
  end

  def test_s37_observe_yields_the_leader_at_once_and_wakes_on_each_change
    needs_leases!
    pool = TinyPool.new(3, "s37")
    seen = Queue.new
    observer = Thread.new do
      count = 0
      Advlock.observe(pool, "beat", "s37", wait: 30) do |leader|
        seen << [leader, now]
        count += 1
        break if leader.nil? && count > 1 # the resignation after a term
      end
    end
    first, = seen.pop
    assert_nil first # nobody leads yet
    term = nil
    Advlock.leader(pool, "beat", "s37", candidate: "pod-a", ttl: 5, timeout: 1) do |l|
      term = l.term
      granted = now
      leader, at = seen.pop
      assert_operator at - granted, :<, 2, "observe woke #{at - granted} s after the change"
      assert_equal [term, "pod-a", "s37"], [leader.term, leader.candidate, leader.application_name]
      assert_kind_of Time, leader.expires_at
      sleep 0.3
    end
    resigned = now
    gone, at = seen.pop
    assert_nil gone
    assert_operator at - resigned, :<, 2, "observe woke #{at - resigned} s after the resignation"
    assert observer.join(5)
    # An Enumerator without a block; known_term skips the leader the caller knows.
    assert_nil Advlock.observe(pool, "beat", "s37", wait: 1).first
  ensure
    pool&.close
  end

  def test_s38_leaving_the_block_hands_over_at_once
    needs_leases!
    pool = TinyPool.new(3, "s38")
    a_in = Queue.new
    leave = Queue.new
    a_lease = nil
    a = Thread.new do
      Advlock.leader(pool, "beat", "s38", candidate: "pod-a", ttl: 30, timeout: 0) do |l|
        a_lease = l
        a_in << 1
        leave.pop
      end
    end
    a_in.pop
    b_term = nil
    b_elected_at = nil
    b = Thread.new do
      Advlock.leader(pool, "beat", "s38", candidate: "pod-b", ttl: 30, timeout: 10) do |l|
        b_elected_at = now
        b_term = l.term
      end
    end
    wait_until(10, "pod-b to campaign") { lease_rows(admin).any? { |r| !r[1] } }
    left_at = now
    leave << :resign
    a.join
    b.join
    assert_nil a_lease.lost # it resigned: not lost
    assert_operator b_elected_at - left_at, :<, 1 # elected at once, not at the end of a 30 s TTL
    assert_operator b_term, :>, a_lease.term
  ensure
    pool&.close
  end

  def test_s29_s36_election_unavailable_says_why_and_arguments_are_checked
    pool = TinyPool.new(1, "election")
    [["", ArgumentError], ["x" * 129, ArgumentError], ["a\nb", ArgumentError], [7, TypeError]].each do |bad, error|
      e = assert_raises(error) { Advlock.leader(pool, "beat", candidate: bad, ttl: 1, timeout: 0) { flunk } }
      assert_match(/\Acandidate/, e.message)
    end
    assert_raises(ArgumentError) { Advlock.observe(pool, "beat", wait: 0) { flunk } }
    assert_raises(TypeError) { Advlock.observe(pool, "beat", known_term: "7") { flunk } }
    expected = { "extension" => Advlock::NotPreloaded, "edition" => Advlock::LeasesUnavailable }[server_kind]
    skip "elections work on this server (the preloaded one): checked on the other two" unless expected
    assert_raises(expected) { Advlock.leader(pool, "beat", candidate: "pod-a", ttl: 1, timeout: 0) { flunk } }
    assert_raises(expected) { Advlock.observe(pool, "beat") { flunk } }
  ensure
    pool&.close
  end
end
