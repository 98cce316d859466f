--- moor.schema: build JSON Schema tables (the same tables go to LLM providers)
-- and validate decoded JSON values against them with short, path-qualified
-- messages an author or a model can act on. This file only assembles the
-- module from its parts:
--   words.lua     the value model, message wording and paths they share
--   validate.lua  validate(s, value [, root]), with the pattern cache (PCRE2)
--   check.lua     check(s) / is_schema(t): is s a schema moor understands?
--   build.lua     the builders (object, string, ..., optional)
--
-- Schemas are plain tables; a schema is treated as immutable once it has been
-- used for validation (per-schema lookups are cached in weak tables).
local validate = require "moor.schema.validate"
local check = require "moor.schema.check"
local build = require "moor.schema.build"

local M = {
  validate = validate.validate,
  check = check.check,
  is_schema = check.is_schema,
}
for k, v in pairs(build) do M[k] = v end

return M
