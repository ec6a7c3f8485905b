# frozen_string_literal: true

require_relative "test_helper"
require "open3"

# Every ```ruby block of clients/ruby/README.md runs as written (DATABASE_URL set), against the
# gem `gem build` made when run_tests.sh installed it (ADVLOCK_RB_GEM_HOME), else against lib/;
# the lease and election examples on a preloaded server only (skipped elsewhere, saying why).
class ReadmeTest < AdvlockCase
  README = File.read(File.expand_path("../README.md", __dir__))
  BLOCKS = README.scan(/^```ruby\n(.*?)^```$/m).map(&:first)
  # Leases, elections and lease_check need advlock preloaded.
  NEEDS_LEASES = /Advlock\.(lease|leader|observe|lease_check)\(/

  def test_readme_has_examples
    assert_operator BLOCKS.size, :>=, 7
    assert_operator BLOCKS.join.scan("# -> ").size, :>=, 8
    assert(BLOCKS.any? { |code| code.include?("Advlock.lease(") })
  end

  def run_example(code)
    env = { "DATABASE_URL" => DSN }
    cmd = ["ruby", "-e", code]
    if (home = ENV.fetch("ADVLOCK_RB_GEM_HOME", nil))
      env["GEM_HOME"] = home
      env["GEM_PATH"] = [home, ENV.fetch("ADVLOCK_RB_SYSTEM_GEM_PATH", Gem.path.join(":"))].join(":")
    else
      cmd.insert(1, "-I#{File.expand_path('../lib', __dir__)}")
    end
    out, err, status = Open3.capture3(env, *cmd)
    assert status.success?, "#{code}\n--- stdout\n#{out}\n--- stderr\n#{err}"
    # `# -> text`: output the example promises.
    code.scan(/# -> (.+)$/).flatten.each do |expected|
      assert_includes out, expected.strip, "#{expected.inspect} not in the output:\n#{out}"
    end
    # And nothing on stderr that warns (Ruby -w is not on: a warning here is the gem's own).
    assert_empty err.lines.grep(/warning/i), err
  end

  BLOCKS.each_with_index do |code, i|
    define_method("test_s34_readme_example_block#{i + 1}") do
      skip LEASES_SKIP[server_kind] if code.match?(NEEDS_LEASES) && server_kind != "preloaded"
      run_example(code)
    end
  end
end
