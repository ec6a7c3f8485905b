-- Leader election in one session: campaign, leader, observe (its immediate answers), resign,
-- the views' election columns, the CALL forms, arguments (NOTIFY: pg_test/leases). Without advlock preloaded
-- every election function raises 55000 after checking its arguments (election.out); the
-- preloaded run's output is election_1.out. Between sessions (observers woken by a grant, a
-- resignation, an expiry): pg_test/leases/test_election.py.
\set VERBOSITY terse
CREATE TEMP TABLE before AS SELECT terms_started, terms_expired, terms_resigned FROM advlock_lease_stats;
SELECT advlock_campaign('jobs', 'beat', 60000, 0, 'pod-a pid 1') AS t1 \gset
SELECT :'t1'::bigint > 0 AS won;
-- Nobody else wins while pod-a leads (timeout 0: NULL), nor takes the key as a semaphore.
SELECT advlock_campaign('jobs', 'beat', 60000, 0, 'pod-b') IS NULL AS lost;
SELECT advlock_lease('jobs', 'beat', 60000, 0, slots => 2);
SELECT term = :'t1' AS is_t1, candidate, expires_at - since AS ttl, pid = pg_backend_pid() AS here,
       application_name
  FROM advlock_leader('jobs', 'beat');
SELECT term = :'t1' AS same_by_key FROM advlock_leader(advlock_key('jobs', 'beat'));
SELECT key = advlock_key('jobs', 'beat') AS key_matches, label, slots, candidate
  FROM advlock_leases WHERE lease = :'t1';
-- Observe: the leader differs from the known term (NULL: none known) at once...
SELECT changed, term = :'t1' AS is_t1, candidate FROM advlock_observe_leader('jobs', 'beat', 0);
SELECT changed, term = :'t1' AS is_t1 FROM advlock_observe_leader('jobs', 'beat', 0, :'t1'::bigint - 1);
-- ... or the wait runs out (here after 20 ms) with changed false and the leader as known.
SELECT changed, term = :'t1' AS is_t1 FROM advlock_observe_leader('jobs', 'beat', 20, :'t1');
-- Renewing keeps the term; a term is a lease.
SELECT advlock_lease_renew(:'t1', 60000);
SELECT advlock_resign(:'t1'), advlock_resign(:'t1') AS again;
SELECT count(*) AS leaders FROM advlock_leader('jobs', 'beat');
SELECT changed, term FROM advlock_observe_leader('jobs', 'beat', 0, :'t1');
-- A later term is a larger token.
SELECT advlock_campaign('jobs', 'beat', 60000, 0, 'pod-b') > :'t1' AS larger;
SELECT advlock_lease_release(lease) AS released_by_lease_release FROM advlock_leases WHERE candidate = 'pod-b';
-- Campaign won in a statement that then fails: the term ends with it.
SELECT advlock_campaign(12, 60000, 0, 'x') > 0, 1 / (random() * 0)::int;
SELECT count(*) AS left_after_failure FROM advlock_leader(12);
-- A plain lease on a key leads it too, with no candidate.
SELECT advlock_lease(13, 60000, 0) AS plain \gset
SELECT term = :'plain' AS plain_leads, candidate IS NULL AS no_candidate FROM advlock_leader(13);
SELECT advlock_resign(:'plain');
SELECT s.terms_started - b.terms_started AS started, s.terms_expired - b.terms_expired AS expired,
       s.terms_resigned - b.terms_resigned AS resigned
  FROM advlock_lease_stats s, before b;

-- The CALL forms commit first (no snapshot held while waiting).
CALL advlock_wait_campaign(advlock_key('jobs', 'call'), 60000, 0, 'pod-c') \gset
CALL advlock_wait_leader(advlock_key('jobs', 'call'), 0, NULL) \gset w_
SELECT :'term'::bigint > 0 AS won, :'w_term' = :'term' AS observed, :'w_changed' AS changed, :'w_candidate' AS candidate;
SELECT advlock_resign(term) FROM advlock_leader('jobs', 'call');
CALL advlock_wait_leader(advlock_key('jobs', 'call'), 10);
BEGIN;
CALL advlock_wait_leader(advlock_key('jobs', 'call'), 10);
ROLLBACK;
-- Arguments.
SELECT advlock_campaign('jobs', 'beat', 60000, 0, '');
SELECT advlock_campaign('jobs', 'beat', 60000, 0, repeat('x', 129));
SELECT advlock_campaign('jobs', 'beat', 60000, 0, E'pod\n1');
SELECT advlock_campaign('jobs', 'beat', 60000, 0, NULL);
SELECT advlock_campaign('jobs', 'beat', 0, 0, 'pod');
SELECT advlock_campaign('jobs', 'beat', 60000, -1, 'pod');
SELECT advlock_campaign(NULL::bigint, 60000, 0, 'pod');
SELECT advlock_campaign('', 'beat', 60000, 0, 'pod');
SELECT advlock_campaign('jobs', NULL::bigint, 60000, 0, 'pod');
SELECT * FROM advlock_leader(NULL::bigint);
SELECT * FROM advlock_leader('jobs', NULL::text);
SELECT * FROM advlock_observe_leader('jobs', 'beat', -1);
SELECT * FROM advlock_observe_leader('jobs', 'beat', NULL);
SELECT * FROM advlock_observe_leader(NULL::bigint, 0);
SELECT advlock_resign(NULL);
CALL advlock_wait_leader(NULL, 0);
CALL advlock_wait_leader(1, -1);
CALL advlock_wait_campaign(1, 1000, 0, '');
-- A candidate of exactly 128 bytes is accepted.
SELECT advlock_campaign(14, 60000, 0, repeat('y', 128)) > 0 AS max_length;
SELECT length(candidate) FROM advlock_leader(14);
SELECT advlock_resign(term) FROM advlock_leader(14);
SELECT count(*) AS left FROM advlock_leases;
