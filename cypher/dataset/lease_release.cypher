// Give the lease back (only $owner's own: a lease taken over after it lapsed is not touched).
MATCH (l:SeederLease {name: $name, owner: $owner})
DELETE l
