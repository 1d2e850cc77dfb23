// Drop a dataset's full-text index on name words (for --reset); nothing happens when it is not there.
DROP INDEX {{dataset}}_words IF EXISTS
