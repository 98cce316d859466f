---@meta moor.schema
-- luacheck: no unused, no max line length (definitions only: parameters name what a call takes)
-- LuaLS annotations for moor.schema (lua/moor/schema/): builders of plain
-- JSON Schema tables, and validation. Definitions only, never run.

---@class moor.SchemaOptions
---@field description? string
---@field title? string

---@class moor.StringOptions: moor.SchemaOptions
---@field minLength? integer
---@field maxLength? integer
---@field pattern? string an ECMA-262 regular expression, searched (not anchored)
---@field format? string
---@field enum? string[]

---@class moor.NumberOptions: moor.SchemaOptions
---@field minimum? number
---@field maximum? number
---@field exclusiveMinimum? number
---@field exclusiveMaximum? number
---@field enum? number[]

---@class moor.ArrayOptions: moor.SchemaOptions
---@field minItems? integer
---@field maxItems? integer

---@class moor.ObjectOptions: moor.SchemaOptions
---@field additionalProperties? boolean|moor.Schema

---@class moor.schema
---@field null_value lightuserdata JSON null (moor.json.null)
local schema = {}

--- An object of these properties; every property is required unless wrapped in optional().
---@param props table<string, moor.Schema>
---@param opts? moor.ObjectOptions
---@return moor.Schema
function schema.object(props, opts) end

---@param opts? moor.StringOptions
---@return moor.Schema
function schema.string(opts) end

---@param opts? moor.NumberOptions
---@return moor.Schema
function schema.integer(opts) end

---@param opts? moor.NumberOptions
---@return moor.Schema
function schema.number(opts) end

---@param opts? moor.SchemaOptions
---@return moor.Schema
function schema.boolean(opts) end

---@param opts? moor.SchemaOptions
---@return moor.Schema
function schema.null(opts) end

--- Any JSON value.
---@param opts? moor.SchemaOptions
---@return moor.Schema
function schema.any(opts) end

---@param items moor.Schema
---@param opts? moor.ArrayOptions
---@return moor.Schema
function schema.array(items, opts) end

--- One of these values.
---@param values any[]
---@param opts? moor.SchemaOptions
---@return moor.Schema
function schema.enum(values, opts) end

--- A property that may be left out (in schema.object).
---@param s moor.Schema
---@return moor.Schema
function schema.optional(s) end

---@param s any
---@return boolean
function schema.is_optional(s) end

--- Does value fit s? true, or nil and a path-qualified message ("line: must be an integer >= 1").
---@param s moor.Schema
---@param value any
---@param root? string the name of value in the message
---@return true|nil ok
---@return string? message
function schema.validate(s, value, root) end

--- Is s a schema moor understands? true, or nil and why not.
---@param s any
---@return true|nil ok
---@return string? message
function schema.check(s) end

---@param t any
---@return boolean
function schema.is_schema(t) end

return schema
