// Drop a dataset's full-text index on names (for --reset); nothing happens when it is not there.
DROP INDEX {{dataset}}_name IF EXISTS
