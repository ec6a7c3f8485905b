# frozen_string_literal: true

require "minitest/autorun"
require "json"
$LOAD_PATH.unshift File.expand_path("../lib", __dir__)
require "advlock"

# The holders in a lock timeout's DETAIL are read as data: the DETAIL is rendered from the
# wording the server's messages are catalogued with (sql/messages.toml, [[description]] id =
# "holders", tied to the server's Rust and SQL by scripts/messages.py) and parsed back with the
# client's own parser. A change of that wording fails here, naming the catalogued text. Needs no
# server (it runs once per run_tests.sh run, like every file of the suite).
class MessagesTest < Minitest::Test
  CATALOG = File.expand_path("../../../sql/messages.toml", __dir__)

  # The `texts` of the [[description]] whose id is `id`. A TOML reader of just what the catalog
  # uses there (Ruby has none built in): an array of basic ("...") or literal ('...') strings,
  # possibly over several lines.
  def self.description_texts(id)
    toml = File.read(CATALOG)
    block = toml.split(/^\[\[description\]\]\s*$/).drop(1).map { |b| b.split(/^\[/).first }
                .find { |b| b.match?(/^id = "#{Regexp.escape(id)}"\s*$/) }
    raise "#{CATALOG}: no [[description]] with id = #{id.inspect}" unless block

    array = block[/^texts = \[((?:"(?:[^"\\]|\\.)*"|'[^']*'|[^\]])*)\]/m, 1]
    raise "#{CATALOG}: the [[description]] #{id.inspect} has no texts = [...]" unless array

    array.scan(/"(?:[^"\\]|\\.)*"|'[^']*'/).map { |s| s.start_with?('"') ? JSON.parse(s) : s[1..-2] }
  end

  TEXTS = description_texts("holders")

  # The catalogued text that contains `placeholder`.
  def text_with(placeholder)
    found = TEXTS.find { |t| t.include?("{#{placeholder}}") }
    assert found, "#{CATALOG}: no holders text has {#{placeholder}} any more (texts: #{TEXTS.inspect}); the " \
                  "client's parser (Advlock::LockTimeout.parse_holders) reads it"
    found
  end

  # What SQL's quote_literal writes: '' for a quote, an E'' string (backslashes doubled) when a
  # backslash is present; NULL is written as nothing (format('%s', NULL)).
  def quote_literal(value)
    return "" if value.nil?

    quoted = value.gsub("'", "''")
    value.include?("\\") ? "E'#{quoted.gsub('\\', '\\\\\\\\')}'" : "'#{quoted}'"
  end

  def render(template, values)
    values.reduce(template) { |text, (name, value)| text.gsub("{#{name}}", value) }
  end

  def detail(holders)
    one = text_with("pid")
    described = holders.map do |h|
      render(one, "pid" => h.pid.to_s, "application_name" => quote_literal(h.application_name),
                  "state" => quote_literal(h.state))
    end
    render(text_with("holder_list"), "holder_list" => described.join(", "))
  end

  def assert_parsed(holders)
    rendered = detail(holders)
    parsed = Advlock::LockTimeout.parse_holders(rendered)
    assert_equal holders, parsed,
                 "the client's parser did not read back the DETAIL #{rendered.inspect} rendered from #{CATALOG}'s " \
                 "holders texts #{text_with('holder_list').inspect} and #{text_with('pid').inspect}: the wording " \
                 "changed, change Advlock::LockTimeout::HOLDER with it"
  end

  PLAIN = Advlock::Holder.new(4242, "worker-1", "idle in transaction")
  QUOTE_AND_BACKSLASH = Advlock::Holder.new(17, "it's C:\\jobs\\nightly", "active")
  NULL_STATE = Advlock::Holder.new(99_999, "cron", nil)

  def test_s06_holders_parsed_from_the_catalogued_detail
    assert_parsed([PLAIN])
    assert_parsed([QUOTE_AND_BACKSLASH])
    assert_parsed([NULL_STATE])
    assert_parsed([PLAIN, QUOTE_AND_BACKSLASH])
    assert_parsed([NULL_STATE, QUOTE_AND_BACKSLASH, PLAIN])
    # Through the error as the client builds it from the server's DETAIL.
    error = Advlock::LockTimeout.new("could not obtain lock", detail: detail([QUOTE_AND_BACKSLASH, NULL_STATE]))
    assert_equal QUOTE_AND_BACKSLASH.pid, error.pid
    assert_equal QUOTE_AND_BACKSLASH.application_name, error.application_name
    assert_nil error.holders[1].state
  end
end
