// Server name, version and edition (tests assert Neo4j 5.26 Community).
CALL dbms.components() YIELD name, versions, edition
RETURN name, versions, edition
