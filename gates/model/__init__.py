"""What a contract is: its schema, its typed model, the rules pv reports and the findings it
shows, semantic versions, YAML read with positions, and a project's ``[tool.shipgate]`` table."""
