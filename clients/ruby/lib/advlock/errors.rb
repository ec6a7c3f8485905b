# frozen_string_literal: true

module Advlock
  # Base class of every advlock error.
  class Error < StandardError; end

  # A transaction-scope lock was asked for outside a transaction block: it would end with the
  # statement, protecting nothing.
  class NotInTransaction < Error; end

  # One holder named by a lock-timeout error.
  Holder = Struct.new(:pid, :application_name, :state)

  # The lock stayed busy for the whole bounded wait (SQLSTATE 55P03). #holders lists who held
  # it when the wait ended (from the server's DETAIL, or advlock_holders / advlock_leases); it
  # is empty when the holder let go just after the wait ended.
  class LockTimeout < Error
    attr_reader :holders, :detail

    def initialize(message = nil, detail: nil, holders: nil)
      super(detail ? "#{message}\nDETAIL: #{detail}" : message)
      @detail = detail
      @holders = (holders || LockTimeout.parse_holders(detail)).freeze
    end

    # The (first) holder's backend pid, if one was named.
    def pid
      holders.first&.pid
    end

    # The (first) holder's application_name, if one was named.
    def application_name
      holders.first&.application_name
    end

    # The DETAIL is built with format('PID %s (application_name %s, state %s)', pid,
    # quote_literal(app), quote_literal(state)): '' for a quote, an E'' string when a
    # backslash is present, nothing for NULL.
    LITERAL = "(E?'(?:[^']|'')*'|)"
    HOLDER = /PID (\d+) \(application_name #{LITERAL}, state #{LITERAL}\)/

    def self.unquote(literal)
      return nil if literal.empty?

      escaped = literal.start_with?("E")
      body = (escaped ? literal[2..-2] : literal[1..-2]).gsub("''", "'")
      escaped ? body.gsub("\\\\", "\\") : body
    end

    def self.parse_holders(detail)
      return [] if detail.nil? || detail.empty?

      detail.scan(HOLDER).map { |pid, app, state| Holder.new(Integer(pid), unquote(app), unquote(state)) }
    end
  end

  # A session lock's connection was lost (or the lock was gone at unlock time): whatever the
  # block did after that was not protected. Raised at the end of the block, never swallowed.
  class LockLost < Error; end

  # What a session lock's watchdog raises into the block's thread with interrupt: true when the
  # lock's connection closes, and what leaving the block then raises.
  class LockInterrupted < LockLost; end

  # The lease stayed busy for the whole bounded wait: #holders has the holders' pid and
  # application_name (from advlock_leases).
  class LeaseTimeout < LockTimeout; end

  # A lease ended while its block ran: a renewal returned false (it expired, or someone released
  # it), or no renewal succeeded before the renew deadline.
  class LeaseLost < LockLost; end

  # What the lease's renewal thread raises into the block's thread with interrupt: true, and what
  # leaving the block then raises (also when the block swallowed it).
  class LeaseInterrupted < LeaseLost; end

  # advlock_fence refused this writer's token (SQLSTATE LK001): a larger token has already passed
  # the fence, so a newer holder has taken over. The transaction is aborted: roll it back and stop
  # writing. #token is the refused token, #passed the one that had passed (from the server's
  # message), #detail the server's DETAIL.
  class FenceRefused < Error
    attr_reader :token, :passed, :detail

    def initialize(message = nil, token: nil, passed: nil, detail: nil)
      super(detail ? "#{message}\nDETAIL: #{detail}" : message)
      @token = token
      @passed = passed
      @detail = detail
    end
  end

  # advlock_lease_check found the lease no longer held (SQLSTATE LK002) inside the writer's
  # transaction: it expired or was released. The transaction is aborted: roll it back.
  class LeaseNotHeld < LeaseLost; end

  # This database has no leases: the SQL edition (or an extension version before them).
  class LeasesUnavailable < Error; end

  # advlock is not in shared_preload_libraries, so every lease function fails (55000).
  class NotPreloaded < LeasesUnavailable; end

  # Neither the advlock extension nor the SQL edition is installed (and no schema: named it).
  class NotInstalled < Error; end

  # session_lock found that its connection is not one server session for its whole life: a
  # pooler in transaction or statement mode hands the server session to other clients between
  # transactions, so a session lock taken through it would be shared with them.
  class UnsafePooler < Error; end
end
