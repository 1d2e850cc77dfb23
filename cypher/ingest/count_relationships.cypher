// Relationships between nodes of a dataset as stored (each stored once).
MATCH (:{{dataset}})-[r]->(:{{dataset}}) RETURN count(r) AS relationships
