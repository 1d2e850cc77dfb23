// Remove every node of a dataset (for --reset, after its relationships), committed every $batch
// nodes. DETACH: a relationship added from outside the dataset must not block the reset.
MATCH (n:{{dataset}})
CALL { WITH n DETACH DELETE n } IN TRANSACTIONS OF $batch ROWS
RETURN count(*) AS done
