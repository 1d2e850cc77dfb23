// Advance the resume counters in the same transaction as the batch they describe, fenced by the
// writer's lease: no row (and the batch rolls back) when $owner no longer holds it. $owner null:
// a writer used without a lease (tests of the writer alone).
MATCH (m:SeederDataset {name: $name})
OPTIONAL MATCH (l:SeederLease {name: $name})
WITH m, l
WHERE $owner IS NULL OR l.owner = $owner
SET m.nodes_done = coalesce($nodes_done, m.nodes_done),
    m.relationships_done = coalesce($relationships_done, m.relationships_done),
    l.until = CASE WHEN $owner IS NULL THEN l.until ELSE datetime() + duration({seconds: $ttl}) END
RETURN m.name AS name
