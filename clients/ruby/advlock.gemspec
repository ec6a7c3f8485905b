# frozen_string_literal: true

require_relative "lib/advlock/version"

Gem::Specification.new do |spec|
  spec.name = "advlock"
  spec.version = Advlock::VERSION
  spec.summary = "Safe PostgreSQL advisory locks: bounded waits, session locks that refuse transaction poolers, " \
                 "leases, leader election, fences"
  spec.description = <<~TEXT
    The Ruby client of advlock, the PostgreSQL extension that makes advisory locks safe: transaction
    locks with server-side bounded waits (pg and ActiveRecord), session locks on a connection of their
    own that refuse transaction-mode poolers and notice at once when that connection dies, leases
    renewed by a background thread, leader election, fencing tokens and fences checked in the
    write's transaction. Works with the extension and with its SQL edition.
  TEXT
  spec.authors = ["advlock contributors"]
  spec.license = "PostgreSQL"
  spec.required_ruby_version = ">= 3.1"
  spec.files = Dir["lib/**/*.rb"] + %w[README.md LICENSE advlock.gemspec]
  spec.require_paths = ["lib"]
  spec.add_dependency "pg", "~> 1.2"
  spec.metadata["rubygems_mfa_required"] = "true"
end
