// Remove up to $batch nodes of a dataset with their relationships (for --reset); returns how many.
MATCH (n:{{dataset}})
WITH n LIMIT $batch
DETACH DELETE n
RETURN count(*) AS deleted
