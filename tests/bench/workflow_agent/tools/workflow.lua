-- The workflow tool as an agent enables it, at its highest maxSubagents.
return require("moor.tools.workflow") { maxSubagents = 128 }
