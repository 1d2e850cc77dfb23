// Take the writer lease of dataset $name for $owner: free, already $owner's, lapsed, or held by
// $takeover (a holder that is known to be gone). The first SET takes the lease node's write lock,
// so two writers asking at once are serialised and the second reads what the first wrote.
MERGE (l:SeederLease {name: $name})
SET l.asked = coalesce(l.asked, 0) + 1
WITH l, l.owner AS held, l.until AS until, l.command AS command, l.since AS since
WITH l, held, until, command, since,
     held IS NULL OR held = $owner OR held = $takeover OR until < datetime() AS free
SET l.owner = CASE WHEN free THEN $owner ELSE held END,
    l.command = CASE WHEN free THEN $command ELSE command END,
    l.since = CASE WHEN free THEN datetime() ELSE since END,
    l.until = CASE WHEN free THEN datetime() + duration({seconds: $ttl}) ELSE until END
RETURN free, held, command, toString(since) AS since
