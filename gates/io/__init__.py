"""Files written whole or not at all (one file, or several under a journal and a lock), JSON
read defensively, paths into JSON, and the absolute paths of one machine found in text."""
