// The relationship types among the adopted nodes ($types: only those; null: all), with how many
// relationships of each there are, for the dataset record.
MATCH (:{{dataset}})-[r]->(:{{dataset}})
WHERE $types IS NULL OR type(r) IN $types
RETURN type(r) AS type, count(*) AS relationships
