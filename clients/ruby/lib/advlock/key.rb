# frozen_string_literal: true

# The advlock gem (lib/advlock.rb).
module Advlock
  # advlock key spec v1 (docs/keys/SPEC.md) in pure Ruby: SipHash-2-4 with an all-zero 128-bit
  # key over UTF-8(ns) || 0x00 || UTF-8(id), read as a signed 64-bit integer. An integer id
  # hashes as its decimal text, so key("account", 42) == key("account", "42").
  module Key
    MASK = (1 << 64) - 1
    INT8_MIN = -(1 << 63)
    INT8_MAX = (1 << 63) - 1

    module_function

    def rotl(value, bits)
      ((value << bits) | (value >> (64 - bits))) & MASK
    end

    def sipround(state)
      v0, v1, v2, v3 = state
      v0 = (v0 + v1) & MASK
      v1 = rotl(v1, 13) ^ v0
      v0 = rotl(v0, 32)
      v2 = (v2 + v3) & MASK
      v3 = rotl(v3, 16) ^ v2
      v0 = (v0 + v3) & MASK
      v3 = rotl(v3, 21) ^ v0
      v2 = (v2 + v1) & MASK
      v1 = rotl(v1, 17) ^ v2
      v2 = rotl(v2, 32)
      [v0, v1, v2, v3]
    end

    def compress(state, word, rounds)
      state[3] ^= word
      rounds.times { state = sipround(state) }
      state[0] ^= word
      state
    end

    def siphash24(bytes)
      state = [0x736F6D6570736575, 0x646F72616E646F6D, 0x6C7967656E657261, 0x7465646279746573]
      tail = bytes.bytesize % 8
      bytes.byteslice(0, bytes.bytesize - tail).unpack("Q<*").each { |m| state = compress(state, m, 2) }
      last = (bytes.bytesize & 0xFF) << 56
      bytes.byteslice(bytes.bytesize - tail, tail).bytes.each_with_index { |b, i| last |= b << (8 * i) }
      state = compress(state, last, 2)
      state[2] ^= 0xFF
      4.times { state = sipround(state) }
      state.reduce(:^)
    end

    # The server's rules for ns (22004 NULL, 22023 empty), checked before any round trip.
    def check_ns(ns)
      raise TypeError, "ns must be a String, got #{ns.class}" unless ns.is_a?(String)
      raise ArgumentError, "ns must not be empty" if ns.empty?
      raise ArgumentError, "ns must not contain NUL characters (PostgreSQL text cannot hold them)" if ns.include?("\0")

      ns
    end

    # An id as the text the server hashes: String as is, Integer as decimal (bigint range).
    # true/false/nil/Float are refused: they would silently hash as something else.
    def id_text(id, name = "id")
      case id
      when Integer
        raise ArgumentError, "#{name} #{id} is out of the bigint range" unless id.between?(INT8_MIN, INT8_MAX)

        id.to_s
      when String
        if id.include?("\0")
          raise ArgumentError, "#{name} must not contain NUL characters (PostgreSQL text cannot hold them)"
        end

        id
      else
        raise TypeError, "#{name} must be a String or an Integer, got #{id.class}"
      end
    end

    def key(ns, id = "")
      data = "#{check_ns(ns)}\0#{id_text(id)}".encode(Encoding::UTF_8).b
      h = siphash24(data)
      h >= (1 << 63) ? h - (1 << 64) : h
    end
  end

  # The advisory lock key of (ns, id): equal to SELECT advlock_key(ns, id).
  def self.key(ns, id = "")
    Key.key(ns, id)
  end
end
