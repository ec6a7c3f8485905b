# frozen_string_literal: true

module Advlock
  # Always the advlock extension version this gem was released with (Cargo.toml's version;
  # the gemspec reads it from here).
  VERSION = "0.6.0"
end
