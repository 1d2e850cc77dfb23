// Remove every relationship of a dataset (for --reset), committed every $batch deletions: one
// transaction for a Prime-scale graph (millions of relationships) would exceed Neo4j's
// transaction memory. Runs as an auto-commit query (CALL ... IN TRANSACTIONS needs one).
MATCH (:{{dataset}})-[r]->()
CALL { WITH r DELETE r } IN TRANSACTIONS OF $batch ROWS
RETURN count(*) AS done
