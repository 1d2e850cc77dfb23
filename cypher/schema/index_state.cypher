// State (POPULATING / ONLINE / FAILED), population progress and options of one index.
SHOW INDEXES YIELD name, type, state, populationPercent, labelsOrTypes, properties, options
WHERE name = $name
RETURN name, type, state, populationPercent, labelsOrTypes, properties, options
