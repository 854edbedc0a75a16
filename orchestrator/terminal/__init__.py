"""What the commands print in a terminal: tables of runs, and query results in other formats."""
