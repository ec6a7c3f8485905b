# frozen_string_literal: true

module Advlock
  # Argument checks, made before any round trip: every error message starts with the
  # argument's name.
  module Args
    INT4_MAX = (2**31) - 1

    module_function

    # Seconds (Integer or Float) to the server's timeout_ms.
    def timeout_ms(timeout, name = "timeout")
      unless timeout.is_a?(Integer) || timeout.is_a?(Float)
        raise TypeError, "#{name} must be a number of seconds, got #{timeout.class}"
      end
      if (timeout.is_a?(Float) && !timeout.finite?) || timeout.negative?
        raise ArgumentError, "#{name} must be a finite number of seconds >= 0, got #{timeout.inspect}"
      end

      ms = (timeout * 1000).round
      ms = 1 if timeout.positive? && ms.zero? # a positive timeout must not silently become a pure try
      raise ArgumentError, "#{name} must be at most #{INT4_MAX / 1000} seconds, got #{timeout.inspect}" if ms > INT4_MAX

      ms
    end

    # A duration that must be more than 0 (a TTL, a wait's bound) to ms: one message for 0 and
    # for a negative number alike.
    def positive_ms(seconds, name)
      if (seconds.is_a?(Integer) || seconds.is_a?(Float)) && !seconds.positive?
        raise ArgumentError, "#{name} must be a positive number of seconds, got #{seconds.inspect}"
      end

      timeout_ms(seconds, name)
    end

    # How a message names a holder: PID 365 (application_name "worker", state "idle"), or "no
    # application_name" when it has none (NULL or empty), never "application_name nil".
    def holder_text(pid, application_name, state = nil)
      app = if application_name.nil? || application_name.empty?
              "no application_name"
            else
              "application_name #{application_name.inspect}"
            end
      "PID #{pid} (#{app}#{state.nil? ? '' : ", state #{state.inspect}"})"
    end

    def mode(shared)
      raise TypeError, "shared must be true or false, got #{shared.class}" unless [true, false].include?(shared)

      shared ? "shared" : "exclusive"
    end

    def ids(ids)
      raise TypeError, "ids must be an Array of ids, not a single String" if ids.is_a?(String)
      raise TypeError, "ids must be an Array of ids, got #{ids.class}" unless ids.respond_to?(:to_a)

      texts = ids.to_a.map { |i| Key.id_text(i, "ids element") }
      raise ArgumentError, "ids must not be empty" if texts.empty?

      texts
    end

    def schema(schema)
      return nil if schema.nil?
      raise TypeError, "schema must be a String (a schema name) or nil, got #{schema.class}" unless schema.is_a?(String)

      if schema.empty? || schema.include?("\0")
        raise ArgumentError,
              "schema must be a schema name, got #{schema.inspect}"
      end

      schema
    end

    def application_name(name)
      return nil if name.nil?
      raise TypeError, "application_name must be a String, got #{name.class}" unless name.is_a?(String)

      name
    end

    def slots(slots)
      raise TypeError, "slots must be an Integer, got #{slots.class}" unless slots.is_a?(Integer)
      unless slots.between?(1, INT4_MAX)
        raise ArgumentError, "slots must be at least 1 (1: a lock; N: up to N holders at once), got #{slots}"
      end

      slots
    end
  end
end
