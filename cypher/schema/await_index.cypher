// Block until the named index is ONLINE (fails after $seconds).
CALL db.awaitIndex($name, $seconds)
