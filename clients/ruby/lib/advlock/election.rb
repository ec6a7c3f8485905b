# frozen_string_literal: true

# The advlock gem (lib/advlock.rb).
module Advlock
  # A term of leadership (Advlock.leader), held like a lease: campaigned for with
  # advlock_campaign (a one-slot lease that names its candidate), renewed in the background,
  # the block stopped at the renew deadline, and resigned at the end of the block
  # (advlock_resign: the next candidate is elected at once) unless it was stopped at the renew
  # deadline (then it runs out at its TTL). #term is the term, a fencing token larger than every
  # earlier term of the key.
  class Leadership < Lease
    ACQUIRE = "SELECT @.advlock_campaign(CAST($1 AS text), CAST($2 AS text), CAST($3 AS int4), CAST($4 AS int4)," \
              " CAST($5 AS text))"
    # Campaigning when the key is taken: commits first and waits holding no snapshot.
    WAIT = "CALL @.advlock_wait_campaign(CAST($1 AS int8), CAST($2 AS int4), CAST($3 AS int4), CAST($4 AS text))"
    RELEASE = "SELECT @.advlock_resign(CAST($1 AS int8))"
    CANDIDATE_BYTES = 128

    attr_reader :candidate

    def self.check_candidate(candidate)
      unless candidate.is_a?(String)
        raise TypeError, "candidate must be a String (e.g. host or pod name), got #{candidate.class}"
      end

      unless candidate.bytesize.between?(1, CANDIDATE_BYTES) && !candidate.match?(/[\x00-\x1f\x7f]/)
        raise ArgumentError, "candidate must be 1 to #{CANDIDATE_BYTES} bytes without control characters (observers " \
                             "see it as the leader's name), got #{candidate.inspect}"
      end

      candidate
    end

    def initialize(source, ns, id, candidate, ttl, timeout, renew_deadline, schema, interrupt)
      @candidate = Leadership.check_candidate(candidate)
      super(source, ns, id, ttl, timeout, 1, renew_deadline, schema, interrupt)
    end

    def term
      token
    end

    private

    def what
      "term of leadership"
    end

    def acquire_args(wait_ms)
      [ns, id, ttl_ms, wait_ms, @candidate]
    end

    def wait_args
      [key, ttl_ms, timeout_ms, @candidate]
    end
  end

  # The leader of a key as the server reports it (advlock_leader): its term (a fencing token),
  # candidate, when the term started and when it expires unless renewed (Time), and the backend
  # that last renewed it. An observer gets nil when nobody leads.
  Leader = Struct.new(:term, :candidate, :since, :expires_at, :pid, :application_name)

  # Follows the leader of a key (Advlock.observe): each wait is one statement that the server
  # wakes on a grant, a resignation or an expiry (no polling), holding no snapshot where the pool
  # lends a connection outside a transaction (CALL advlock_wait_leader), else inside the
  # statement (advlock_observe_leader).
  class Observer
    LEADER = "SELECT term, candidate, extract(epoch FROM since), extract(epoch FROM expires_at), pid, " \
             "application_name FROM @.advlock_leader(CAST($1 AS text), CAST($2 AS text))"
    WAIT = "CALL @.advlock_wait_leader(CAST($1 AS int8), CAST($2 AS int4), CAST($3 AS int8))"
    OBSERVE = "SELECT changed, term, candidate, extract(epoch FROM since), extract(epoch FROM expires_at), pid, " \
              "application_name FROM @.advlock_observe_leader(CAST($1 AS text), CAST($2 AS text), CAST($3 AS int4)," \
              " CAST($4 AS int8))"

    def initialize(source, ns, id, known_term, wait, schema)
      @ns = Key.check_ns(ns)
      @id = Key.id_text(id)
      @key = Key.key(ns, id)
      @wait_ms = Args.positive_ms(wait, "wait")
      unless known_term.nil? || known_term.is_a?(Integer)
        raise TypeError, "known_term must be an Integer (a term) or nil, got #{known_term.class}"
      end

      @known_term = known_term
      @source = Lease::Source.for(source, Args.schema(schema))
    end

    # Yields the leader (a Leader) or nil every time it differs from the last one yielded,
    # starting with the current one (unless its term is known_term). Runs until the block
    # breaks (or raises).
    def each
      current = leader_now
      known = @known_term
      if known.nil? || current.nil? || current.term != known
        known = current&.term
        yield current
      end
      loop do
        changed, current = next_change(known)
        next unless changed

        known = current&.term
        yield current
      end
    end

    private

    def leader(row)
      Leader.new(SQL.int(row[0]), row[1], SQL.time(row[2]), SQL.time(row[3]), SQL.int(row[4]), row[5])
    end

    def leader_now
      row = server { @source.query(LEADER, [@ns, @id]) }.first
      row && leader(row)
    end

    # [whether the leader differs from known, the leader now] after at most one wait.
    def next_change(known)
      called = server { @source.call(WAIT, [@key, @wait_ms, known]) }
      if called
        term, changed, candidate = called.first
        return [false, nil] unless SQL.bool(changed)
        return [true, nil] if term.nil?

        # The CALL names the term and candidate; the rest comes from advlock_leader.
        now = leader_now
        return [true, now&.term == SQL.int(term) ? now : Leader.new(SQL.int(term), candidate)]
      end
      row = server { @source.query(OBSERVE, [@ns, @id, @wait_ms, known]) }.first
      return [false, nil] unless SQL.bool(row[0])

      [true, row[1].nil? ? nil : leader(row[1..])]
    end

    def server
      yield
    rescue PG::Error => e
      unavailable = Lease.unavailable(e)
      raise unavailable if unavailable

      raise
    end
  end

  class << self
    # Campaign for the leadership of (ns, id) as `candidate` (e.g. the pod's name): wait at most
    # `timeout` seconds on the server (LeaseTimeout naming the leader), then hold the term for the
    # block, renewed in the background on `source` (a pool, as for Advlock.lease). Yields the
    # Leadership (#term: a fencing token); the block is stopped at the renew deadline (#check!
    # raises LeaseLost; with interrupt: true, LeaseInterrupted is raised into its thread) and the
    # term is resigned at the end of the block: the next candidate is elected at once. Needs
    # advlock in shared_preload_libraries.
    def leader(source, ns, id = "", candidate:, ttl:, timeout:, renew_deadline: nil, schema: nil, interrupt: false,
               &block)
      leadership = Leadership.new(source, ns, id, candidate, ttl, timeout, renew_deadline, schema, interrupt)
      raise ArgumentError, "block: Advlock.leader needs a block (the work done while leading)" unless block

      leadership.run(&block)
    end

    # Follow the leader of (ns, id) on `source` (a pool): yields the current leader (a Leader, or
    # nil when nobody leads) at once, unless its term is `known_term`, then the leader every time
    # it changes, woken by the server (each wait lasts at most `wait` seconds, then waits again).
    # Runs until the block breaks. Without a block, returns an Enumerator.
    def observe(source, ns, id = "", known_term: nil, wait: 30, schema: nil, &block)
      observer = Observer.new(source, ns, id, known_term, wait, schema)
      return observer.enum_for(:each) unless block

      observer.each(&block)
    end
  end
end
