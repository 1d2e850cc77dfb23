// Extend $owner's lease while a long step (an index build) runs; no row when it was lost.
MATCH (l:SeederLease {name: $name, owner: $owner})
SET l.until = datetime() + duration({seconds: $ttl})
RETURN l.owner AS owner
