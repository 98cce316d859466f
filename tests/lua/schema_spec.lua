-- Specs for moor.schema (builders, validation, check) and its patterns
-- (core.regex_compile, host/regex.c). Runs inside the host (`moor test`).

local S = require "moor.schema"
local core = require "moor.core"

local has_json, json = pcall(require, "moor.json")
if not has_json then json = nil end

local NULL = S.null_value   -- moor.json.null inside the host, nil outside

local function marked_array(t)
  return setmetatable(t, { __jsontype = "array" })
end

-- validate and return just the message (nil when valid)
local function msg(s, v, root)
  local ok, m = S.validate(s, v, root)
  if ok then return nil end
  return m
end

local function check_msg(s)
  local ok, m = S.check(s)
  if ok then return nil end
  return m
end

local function build_error(f, ...)
  local ok, err = pcall(f, ...)
  assert.is_false(ok)
  return err
end

describe("moor.schema builders", function()
  it("string() with no options", function()
    assert.are.same({ type = "string" }, S.string())
  end)

  it("string with every option", function()
    assert.are.same({
      type = "string", minLength = 1, maxLength = 10, pattern = "^[a-z]+$",
      description = "a name", format = "hostname",
    }, S.string { minLength = 1, maxLength = 10, pattern = "^[a-z]+$",
                  description = "a name", format = "hostname" })
  end)

  it("string with enum", function()
    assert.are.same({ type = "string", enum = { "a", "b" } }, S.string { enum = { "a", "b" } })
  end)

  it("integer and number", function()
    assert.are.same({ type = "integer", minimum = 1, maximum = 10, description = "n" },
      S.integer { minimum = 1, maximum = 10, description = "n" })
    assert.are.same({ type = "integer" }, S.integer())
    assert.are.same({ type = "number", exclusiveMinimum = 0, exclusiveMaximum = 1.5 },
      S.number { exclusiveMinimum = 0, exclusiveMaximum = 1.5 })
    assert.are.same({ type = "number" }, S.number())
  end)

  it("boolean, null and any", function()
    assert.are.same({ type = "boolean", description = "dry run" }, S.boolean { description = "dry run" })
    assert.are.same({ type = "boolean" }, S.boolean())
    assert.are.same({ type = "null" }, S.null())
    assert.are.same({}, S.any())
    assert.are.same({ description = "anything" }, S.any { description = "anything" })
  end)

  it("array", function()
    assert.are.same({ type = "array", items = { type = "string" }, minItems = 1, maxItems = 3,
                      description = "tags" },
      S.array(S.string(), { minItems = 1, maxItems = 3, description = "tags" }))
    assert.are.same({ type = "array", items = { type = "integer" } }, S.array(S.integer()))
  end)

  it("enum: typed when all strings, untyped otherwise", function()
    assert.are.same({ type = "string", enum = { "a", "b" } }, S.enum { "a", "b" })
    assert.are.same({ enum = { 1, "two", true } }, S.enum { 1, "two", true })
    assert.are.same({ type = "string", enum = { "x" }, description = "d" },
      S.enum({ "x" }, { description = "d" }))
  end)

  it("object lists non-optional properties, sorted, in required", function()
    local s = S.object {
      service = S.string(),
      count = S.integer(),
      dry = S.optional(S.boolean()),
    }
    assert.are.same({
      type = "object",
      properties = { service = { type = "string" }, count = { type = "integer" }, dry = { type = "boolean" } },
      required = { "count", "service" },
    }, s)
  end)

  it("object with only optional fields has no required", function()
    local s = S.object { a = S.optional(S.string()) }
    assert.is_nil(s.required)
    assert.are.same({ type = "object", properties = { a = { type = "string" } } }, s)
    assert.are.same({ type = "object", properties = {} }, S.object {})
    assert.are.same({ type = "object", properties = {} }, S.object())
  end)

  it("object options", function()
    assert.are.same({
      type = "object", properties = { a = { type = "string" } }, required = { "a" },
      additionalProperties = false, description = "args",
    }, S.object({ a = S.string() }, { additionalProperties = false, description = "args" }))
  end)

  it("optional keeps the schema pure and does not mark the original", function()
    local base = S.string { minLength = 1 }
    local opt = S.optional(base)
    assert.are.same(base, opt)
    assert.is_nil(getmetatable(opt))
    assert.is_true(S.is_optional(opt))
    assert.is_false(S.is_optional(base))
    local s = S.object { a = base, b = opt }
    assert.are.same({ "a" }, s.required)
  end)

  it("object accepts plain JSON Schema tables as properties", function()
    local s = S.object { a = { type = "string" }, b = true }
    assert.are.same({ "a", "b" }, s.required)
  end)

  it("marks produced arrays as JSON arrays when moor.json is present", function()
    if not json then return end
    assert.is_true(json.isarray(S.object { a = S.string() }.required))
    assert.is_true(json.isarray(S.enum { "a" }.enum))
  end)

  describe("reject nonsense at the call site", function()
    it("negative length", function()
      local err = build_error(S.string, { minLength = -1 })
      assert.equal("schema.string: minLength: must be a non-negative integer, got -1", err)
    end)

    it("unknown option, with a hint for near misses", function()
      assert.equal('schema.string: unknown option "minlen"', build_error(S.string, { minlen = 1 }))
      assert.equal('schema.integer: unknown option "minlength"',
        build_error(S.integer, { minlength = 1 }))
      assert.equal('schema.string: unknown option "minlength" (did you mean minLength?)',
        build_error(S.string, { minlength = 1 }))
      assert.equal('schema.boolean: unknown option "minimum"', build_error(S.boolean, { minimum = 1 }))
    end)

    it("min greater than max", function()
      assert.equal("schema.string: minLength: 5 is greater than maxLength 3",
        build_error(S.string, { minLength = 5, maxLength = 3 }))
      assert.equal("schema.integer: minimum: no number is >= 10 and <= 1",
        build_error(S.integer, { minimum = 10, maximum = 1 }))
      assert.equal("schema.array: minItems: 2 is greater than maxItems 1",
        build_error(S.array, S.string(), { minItems = 2, maxItems = 1 }))
    end)

    it("bad option types", function()
      assert.equal('schema.integer: minimum: must be a number, got "1"',
        build_error(S.integer, { minimum = "1" }))
      assert.equal("schema.string: options must be a table, got string", build_error(S.string, "x"))
      assert.equal("schema.string: description: must be a string, got 3",
        build_error(S.string, { description = 3 }))
      assert.equal("schema.string: enum[2] must be a string, got 2", build_error(S.string, { enum = { "a", 2 } }))
    end)

    it("bad pattern", function()
      assert.equal("schema.string: pattern: invalid regular expression /(a/: missing closing parenthesis at offset 2",
        build_error(S.string, { pattern = "(a" }))
    end)

    it("bad enum values", function()
      assert.equal("schema.enum: values must be a non-empty list", build_error(S.enum, {}))
      assert.equal("schema.enum: values must be a non-empty list", build_error(S.enum, "a"))
      assert.equal('schema.enum: duplicate value "a"', build_error(S.enum, { "a", "a" }))
      assert.equal("schema.enum: values[1] must be a string, number, boolean or null, got table",
        build_error(S.enum, { {} }))
    end)

    it("bad object properties", function()
      assert.equal('schema.object: property "a" must be a schema, got string',
        build_error(S.object, { a = "string" }))
      assert.equal("schema.object: property names must be strings, got 1",
        build_error(S.object, { S.string() }))
      assert.equal('schema.object: properties.a.type: unknown type "strng" (expected object, array, '
        .. 'string, integer, number, boolean or null)', build_error(S.object, { a = { type = "strng" } }))
      assert.equal("schema.object: properties must be a table of schemas, got string",
        build_error(S.object, "x"))
    end)

    it("bad array items and optional argument", function()
      assert.equal("schema.array: items must be a schema, got string", build_error(S.array, "string"))
      assert.equal("schema.optional: expected a schema table, got nil", build_error(S.optional))
    end)

    it("raises at level 2 (the caller's line)", function()
      -- no tail calls here: they would drop the caller's frame
      local ok, err = pcall(function() local s = S.string { minLength = -1 }; return s end)
      assert.is_false(ok)
      assert.truthy(err:find("schema_spec.lua:%d+: schema.string: minLength"))
      ok, err = pcall(function() local s = S.integer { bogus = 1 }; return s end)
      assert.is_false(ok)
      assert.truthy(err:find('schema_spec.lua:%d+: schema.integer: unknown option "bogus"'))
      ok, err = pcall(function() local s = S.array("x"); return s end)
      assert.is_false(ok)
      assert.truthy(err:find("schema_spec.lua:%d+: schema.array: items must be a schema"))
    end)
  end)
end)

describe("moor.schema.validate", function()
  it("the documented examples", function()
    assert.equal("line: must be an integer >= 1",
      msg(S.object { line = S.integer { minimum = 1 } }, { line = 0 }))
    local items = S.object { items = S.array(S.object { name = S.string { minLength = 1 } }) }
    assert.equal("items[2].name: must be a string of at least 1 character",
      msg(items, { items = { { name = "a" }, { name = "" } } }))
    assert.equal("service: is required", msg(S.object { service = S.string() }, {}))
    assert.equal("count: must be an integer, got string", msg(S.object { count = S.integer() }, { count = "3" }))
  end)

  it("returns true, or nil, message and path", function()
    local s = S.object { a = S.object { b = S.string() } }
    assert.is_true(S.validate(s, { a = { b = "x" } }))
    local ok, m, path = S.validate(s, { a = { b = 1 } })
    assert.is_nil(ok)
    assert.equal("a.b: must be a string, got integer", m)
    assert.equal("a.b", path)
  end)

  it("names the root input, or the given root name", function()
    assert.equal("input: must be an object, got string", msg(S.object {}, "x"))
    assert.equal("result: must be an object, got string", msg(S.object {}, "x", "result"))
    local ok, m, path = S.validate(S.string(), 1, "args")
    assert.is_nil(ok)
    assert.equal("args: must be a string, got integer", m)
    assert.equal("args", path)
  end)

  it("formats paths for root arrays and odd keys", function()
    assert.equal("input[2]: must be a string, got integer", msg(S.array(S.string()), { "a", 2 }))
    assert.equal('input["my key"]: must be a string, got integer',
      msg({ type = "object", properties = { ["my key"] = { type = "string" } } }, { ["my key"] = 1 }))
    assert.equal('a["x-y"][1]: must be a boolean, got string',
      msg({ properties = { a = { properties = { ["x-y"] = { items = { type = "boolean" } } } } } },
        { a = { ["x-y"] = { "no" } } }))
  end)

  it("optional fields may be absent, required may not", function()
    local s = S.object { a = S.optional(S.string()), b = S.boolean() }
    assert.is_true(S.validate(s, { b = true }))
    assert.is_true(S.validate(s, { a = "x", b = false }))
    assert.equal("b: is required", msg(s, { a = "x" }))
    assert.equal("a: must be a string, got integer", msg(s, { a = 1, b = true }))
  end)

  it("reports the first failing field in name order", function()
    local s = S.object { b = S.string(), a = S.string(), c = S.string() }
    assert.equal("a: is required", msg(s, {}))
    assert.equal("b: must be a string, got integer", msg(s, { a = "x", b = 1, c = 2 }))
  end)

  it("required names without a property schema", function()
    assert.equal("id: is required", msg({ type = "object", required = { "id" } }, { x = 1 }))
    assert.is_true(S.validate({ type = "object", required = { "id" } }, { id = 1 }))
  end)

  describe("types", function()
    it("integer vs float", function()
      local s = S.integer()
      assert.is_true(S.validate(s, 3))
      assert.is_true(S.validate(s, 3.0))
      assert.is_true(S.validate(s, -0.0))
      assert.equal("input: must be an integer, got 1.5", msg(s, 1.5))
      assert.equal("input: must be an integer, got string", msg(s, "1"))
      assert.equal("input: must be an integer, got non-finite number", msg(s, 1 / 0))
      assert.is_true(S.validate(S.number(), 3))
      assert.is_true(S.validate(S.number(), 1.5))
      assert.equal("input: must be a number, got string", msg(S.number(), "1.5"))
      assert.equal("input: must be a number, got non-finite number", msg(S.number(), 0 / 0))
    end)

    it("string, boolean, null", function()
      assert.equal("input: must be a string, got boolean", msg(S.string(), true))
      assert.equal("input: must be a boolean, got integer", msg(S.boolean(), 0))
      assert.is_true(S.validate(S.boolean(), false))
      assert.equal("input: must be null, got integer", msg(S.null(), 0))
      assert.is_true(S.validate(S.null(), nil))
      if NULL ~= nil then
        assert.is_true(S.validate(S.null(), NULL))
        assert.equal("input: must be a string, got null", msg(S.string(), NULL))
      end
      assert.equal("input: must be a string, got null", msg(S.string(), nil))
    end)

    it("type lists", function()
      local s = { type = { "string", "null" } }
      assert.is_true(S.validate(s, "x"))
      assert.is_true(S.validate(s, nil))
      assert.equal("input: must be a string or null, got integer", msg(s, 1))
      assert.equal("input: must be an integer, a boolean or null, got 1.5",
        msg({ type = { "integer", "boolean", "null" } }, 1.5))
    end)

    it("non-JSON values", function()
      assert.equal("input: must be a string, got function", msg(S.string(), print))
    end)
  end)

  describe("arrays vs objects", function()
    it("an unmarked empty table is both", function()
      assert.is_true(S.validate({ type = "object" }, {}))
      assert.is_true(S.validate({ type = "array" }, {}))
      assert.is_true(S.validate(S.array(S.string()), {}))
      assert.is_true(S.validate(S.object { a = S.optional(S.string()) }, {}))
      assert.equal("a: is required", msg(S.object { a = S.string() }, {}))
      assert.equal("input: must be an array of at least 1 item", msg(S.array(S.string(), { minItems = 1 }), {}))
      assert.equal("input: must be a string, got empty table", msg(S.string(), {}))
    end)

    it("a marked empty array is not an object", function()
      assert.equal("input: must be an object, got array", msg({ type = "object" }, marked_array {}))
      assert.is_true(S.validate({ type = "array" }, marked_array {}))
      if json then
        assert.equal("input: must be an object, got array", msg({ type = "object" }, json.array {}))
      end
    end)

    it("sequences are arrays, string keys are objects", function()
      assert.equal("input: must be an object, got array", msg({ type = "object" }, { 1, 2 }))
      assert.equal("input: must be an array, got object", msg({ type = "array" }, { a = 1 }))
      assert.is_true(S.validate({ type = "array" }, { 1, 2, 3 }))
      assert.is_true(S.validate({ type = "array" }, marked_array { 1, 2 }))
    end)

    it("mixed keys and holes are neither", function()
      assert.equal("input: must be an array, got table with mixed keys", msg({ type = "array" }, { 1, a = 1 }))
      assert.equal("input: must be an object, got table with mixed keys", msg({ type = "object" }, { 1, a = 1 }))
      assert.equal("input: must be an array, got table with mixed keys",
        msg({ type = "array" }, { [1] = 1, [3] = 3 }))
      assert.equal("input: must be an array, got table with mixed keys", msg({ type = "array" }, { [2] = 1 }))
    end)
  end)

  describe("string keywords", function()
    it("minLength / maxLength, counted in code points", function()
      assert.equal("input: must be a string of at least 2 characters", msg(S.string { minLength = 2 }, "a"))
      assert.equal("input: must be a string of at most 3 characters", msg(S.string { maxLength = 3 }, "abcd"))
      assert.equal("input: must be a string of at most 1 character", msg(S.string { maxLength = 1 }, "ab"))
      assert.equal("input: must be a string of 2 to 4 characters",
        msg(S.string { minLength = 2, maxLength = 4 }, "abcde"))
      assert.equal("input: must be a string of exactly 3 characters",
        msg(S.string { minLength = 3, maxLength = 3 }, "ab"))
      assert.is_true(S.validate(S.string { maxLength = 5 }, "héllo"))    -- 6 bytes, 5 chars
      assert.is_true(S.validate(S.string { minLength = 2, maxLength = 2 }, "日本"))
      assert.is_true(S.validate(S.string { minLength = 2 }, "ab"))
    end)

    it("invalid UTF-8 is an error when lengths are checked", function()
      assert.equal("input: must be valid UTF-8", msg(S.string { maxLength = 5 }, "a\255b"))
    end)

    it("pattern", function()
      local s = S.string { pattern = "^[a-z][a-z0-9-]*$" }
      assert.is_true(S.validate(s, "api-2"))
      assert.equal("input: must be a string matching /^[a-z][a-z0-9-]*$/", msg(s, "2api"))
      -- unanchored: matches anywhere
      assert.is_true(S.validate(S.string { pattern = "o+" }, "foo bar"))
      assert.equal("input: must be a string matching /o+/", msg(S.string { pattern = "o+" }, "bar"))
    end)

    it("a catastrophic pattern hits the match limit and refuses the value", function()
      local s = S.string { pattern = "^(a+)+$" }
      local costly = "is too costly to check against the pattern /^(a+)+$/ (it hit the match limit), " ..
        "so it was refused; send a shorter or simpler value"
      assert.equal("input: " .. costly, msg(s, string.rep("a", 40) .. "!"))
      assert.is_true(S.validate(s, string.rep("a", 40)))
      -- 1 MiB against the patterns of issue 8 (tests/bench measures the time)
      local mib = string.rep("a", 1024 * 1024) .. "!"
      assert.equal("input: " .. costly, msg(s, mib))
      assert.equal("slug: is too costly to check against the pattern /^([a-z0-9]+-?)*$/ " ..
        "(it hit the match limit), so it was refused; send a shorter or simpler value",
        msg(S.object { slug = S.string { pattern = "^([a-z0-9]+-?)*$" } }, { slug = mib }))
    end)

    it("a limit hit inside anyOf/oneOf still refuses the value (fails closed)", function()
      local bomb = string.rep("a", 40) .. "!"
      local any = { anyOf = { { type = "string", pattern = "^(a+)+$" }, { type = "string", minLength = 1 } } }
      assert.equal("input: is too costly to check against the pattern /^(a+)+$/ (it hit the match limit), " ..
        "so it was refused; send a shorter or simpler value", msg(any, bomb))
      local one = { oneOf = { { type = "string", pattern = "^(a+)+$" }, { type = "string", minLength = 1 } } }
      assert.is_nil(S.validate(one, bomb))
      assert.is_true(S.validate(one, "b"))
    end)

    it("lookahead and backreferences", function()
      local pw = S.string { pattern = "^(?=.*[0-9])(?=.*[a-z])\\S{8,}$" }
      assert.is_true(S.validate(pw, "hunter2x"))
      assert.equal("input: must be a string matching /^(?=.*[0-9])(?=.*[a-z])\\S{8,}$/", msg(pw, "hunterxy"))
      local twice = S.string { pattern = "^(\\w+)-\\1$" }
      assert.is_true(S.validate(twice, "ab-ab"))
      assert.is_nil(S.validate(twice, "ab-cd"))
    end)

    it("string keywords ignore other types when untyped", function()
      assert.is_true(S.validate({ minLength = 3 }, 1))
      assert.equal("input: must be a string of at least 3 characters", msg({ minLength = 3 }, "a"))
    end)
  end)

  describe("number keywords", function()
    it("minimum, maximum and exclusive bounds", function()
      assert.equal("input: must be an integer >= 1", msg(S.integer { minimum = 1 }, 0))
      assert.is_true(S.validate(S.integer { minimum = 1 }, 1))
      assert.equal("input: must be an integer <= 10", msg(S.integer { maximum = 10 }, 11))
      assert.equal("input: must be an integer >= 1 and <= 10", msg(S.integer { minimum = 1, maximum = 10 }, 11))
      assert.equal("input: must be a number > 0", msg(S.number { exclusiveMinimum = 0 }, 0))
      assert.is_true(S.validate(S.number { exclusiveMinimum = 0 }, 0.001))
      assert.equal("input: must be a number < 1.5", msg(S.number { exclusiveMaximum = 1.5 }, 1.5))
      assert.equal("input: must be a number >= 0.5", msg(S.number { minimum = 0.5 }, 0))
      assert.equal("input: must be a number >= 1", msg({ minimum = 1 }, 0.5))
      assert.equal("input: must be an integer >= 1", msg({ type = { "integer", "null" }, minimum = 1 }, 0))
    end)
  end)

  describe("array keywords", function()
    it("minItems, maxItems, items", function()
      local s = S.array(S.integer(), { minItems = 1, maxItems = 2 })
      assert.is_true(S.validate(s, { 1, 2 }))
      assert.equal("input: must be an array of 1 to 2 items", msg(s, { 1, 2, 3 }))
      assert.equal("input: must be an array of at most 2 items", msg(S.array(S.any(), { maxItems = 2 }), { 1, 2, 3 }))
      assert.equal("input: must be an array of exactly 1 item",
        msg(S.array(S.any(), { minItems = 1, maxItems = 1 }), { 1, 2 }))
      assert.equal("input[3]: must be an integer, got string", msg(S.array(S.integer()), { 1, 2, "3" }))
    end)

    it("items of nested arrays", function()
      local s = S.array(S.array(S.integer { minimum = 0 }))
      assert.equal("input[2][1]: must be an integer >= 0", msg(s, { { 1 }, { -1 } }))
    end)

    it("JSON null elements in marked arrays", function()
      if NULL == nil then return end
      assert.equal("input[2]: must be an integer, got null", msg(S.array(S.integer()), marked_array { 1, NULL }))
      assert.is_true(S.validate({ items = { type = { "integer", "null" } } }, marked_array { 1, NULL }))
    end)
  end)

  describe("object keywords", function()
    it("additionalProperties false", function()
      local s = S.object({ a = S.string() }, { additionalProperties = false })
      assert.is_true(S.validate(s, { a = "x" }))
      assert.equal("b: is not allowed (allowed: a)", msg(s, { a = "x", zz = 1, b = 2 }))
      assert.equal("x: is not allowed", msg({ type = "object", additionalProperties = false }, { x = 1 }))
    end)

    it("additionalProperties as a schema", function()
      local s = { type = "object", properties = { id = { type = "integer" } },
                  additionalProperties = { type = "string" } }
      assert.is_true(S.validate(s, { id = 1, a = "x", b = "y" }))
      assert.equal("b: must be a string, got integer", msg(s, { id = 1, a = "x", b = 2, c = 3 }))
      assert.is_true(S.validate({ additionalProperties = true }, { x = 1 }))
    end)

    it("a present JSON null is not absent", function()
      if NULL == nil then return end
      local s = S.object { a = S.optional(S.string()) }
      assert.equal("a: must be a string, got null", msg(s, { a = NULL }))
      assert.is_true(S.validate(S.object { a = S.optional { type = { "string", "null" } } }, { a = NULL }))
    end)
  end)

  describe("enum and const", function()
    it("enum", function()
      local s = S.enum { "low", "high" }
      assert.is_true(S.validate(s, "low"))
      assert.equal('input: must be one of "low", "high"', msg(s, "mid"))
      assert.equal('input: must be a string, got integer', msg(s, 1))
      assert.equal('input: must be one of 1, "two", true', msg(S.enum { 1, "two", true }, false))
      assert.is_true(S.validate(S.enum { 1, 2 }, 1.0))
      assert.equal('input: must be "only"', msg({ enum = { "only" } }, "x"))
      assert.is_true(S.validate({ enum = { { a = 1 }, { 1, 2 } } }, { 1, 2 }))
    end)

    it("const", function()
      assert.is_true(S.validate({ const = "x" }, "x"))
      assert.equal('input: must be "x"', msg({ const = "x" }, "y"))
      assert.equal("input: must be 3", msg({ const = 3 }, 4))
      assert.equal("input: must be false", msg({ const = false }, true))
      assert.is_true(S.validate({ const = { a = { 1, 2 } } }, { a = { 1, 2 } }))
      assert.equal("input: must be {...}", msg({ const = { a = 1 } }, { a = 2 }))
    end)
  end)

  describe("combinators", function()
    it("anyOf merges type mismatches", function()
      local s = { anyOf = { { type = "string" }, { type = "integer" } } }
      assert.is_true(S.validate(s, "x"))
      assert.is_true(S.validate(s, 1))
      assert.equal("input: must be a string or an integer, got boolean", msg(s, true))
    end)

    it("anyOf reports the alternative whose type matched", function()
      local s = { anyOf = { { type = "string", minLength = 3 }, { type = "integer", minimum = 1 } } }
      assert.equal("input: must be a string of at least 3 characters", msg(s, "ab"))
      assert.equal("input: must be an integer >= 1", msg(s, 0))
    end)

    it("anyOf reports the deepest failure, joining alternatives at the same spot", function()
      local s = { anyOf = {
        { type = "object", properties = { kind = { const = "a" } } },
        { type = "object", properties = { kind = { const = "b" } } },
      } }
      assert.equal('kind: must be "a"; or must be "b"', msg(s, { kind = "c" }))
      local t = { anyOf = { { type = "object", required = { "url" } },
                            { type = "object", properties = { n = { properties = { x = { type = "string" } } } } } } }
      assert.equal("n.x: must be a string, got integer", msg(t, { n = { x = 1 } }))
    end)

    it("oneOf", function()
      local s = { oneOf = { { type = "integer" }, { type = "string" } } }
      assert.is_true(S.validate(s, 1))
      assert.equal("input: must be an integer or a string, got boolean", msg(s, true))
      local both = { oneOf = { { type = "integer" }, { type = "number" } } }
      assert.is_true(S.validate(both, 1.5))
      assert.equal("input: must match exactly one oneOf alternative, but matches #1 and #2", msg(both, 1))
    end)

    it("allOf", function()
      local s = { allOf = { { type = "integer" }, { minimum = 1 }, { maximum = 5 } } }
      assert.is_true(S.validate(s, 3))
      assert.equal("input: must be a number <= 5", msg(s, 6))
      assert.equal("input: must be an integer, got string", msg(s, "3"))
    end)

    it("nullable via anyOf with a nested object", function()
      local s = S.object { user = { anyOf = { S.object { name = S.string() }, S.null() } } }
      assert.is_true(S.validate(s, { user = { name = "ann" } }))
      assert.equal("user.name: must be a string, got integer", msg(s, { user = { name = 1 } }))
      assert.equal("user: must be an object or null, got string", msg(s, { user = "ann" }))
    end)
  end)

  describe("boolean schemas and annotations", function()
    it("true accepts anything, false nothing", function()
      assert.is_true(S.validate(true, { 1 }))
      assert.equal("input: is not allowed", msg(false, 1))
      assert.equal("x: is not allowed", msg({ properties = { x = false } }, { x = 1 }))
    end)

    it("ignores annotations", function()
      local s = { ["$schema"] = "https://json-schema.org/draft/2020-12/schema", title = "T",
                  description = "d", default = 1, examples = { 1 }, format = "int32", type = "integer" }
      assert.is_true(S.check(s))
      assert.is_true(S.validate(s, 2))
    end)
  end)

  it("validates plain hand-written JSON Schema", function()
    local s = {
      type = "object",
      properties = {
        name = { type = "string", minLength = 1 },
        tags = { type = "array", items = { type = "string", pattern = "^#" }, maxItems = 3 },
        size = { type = "integer", minimum = 0, maximum = 100 },
        mode = { enum = { "fast", "slow" } },
      },
      required = { "name", "size" },
      additionalProperties = false,
    }
    assert.is_true(S.check(s))
    assert.is_true(S.validate(s, { name = "x", size = 5, tags = { "#a" }, mode = "fast" }))
    assert.equal("tags[2]: must be a string matching /^#/", msg(s, { name = "x", size = 5, tags = { "#a", "b" } }))
    assert.equal("size: is required", msg(s, { name = "x" }))
    assert.equal('mode: must be one of "fast", "slow"', msg(s, { name = "x", size = 1, mode = "x" }))
    assert.equal("extra: is not allowed (allowed: mode, name, size, tags)", msg(s, { name = "x", size = 1, extra = 1 }))
  end)

  it("raises on a non-schema", function()
    local ok, err = pcall(S.validate, "string", 1)
    assert.is_false(ok)
    assert.truthy(err:find("schema must be a table or boolean, got string", 1, true))
  end)

  it("is fast on small objects", function()
    local s = S.object { service = S.string { minLength = 1 }, count = S.integer { minimum = 1 },
                         dry = S.optional(S.boolean()) }
    local v = { service = "api", count = 3, dry = true }
    local n = 20000
    local t0 = os.clock()
    for _ = 1, n do S.validate(s, v) end
    local per = (os.clock() - t0) / n
    assert.is_true(per < 50e-6)   -- a few microseconds in practice; loose for busy machines
  end)
end)

describe("moor.schema.check", function()
  it("accepts builder output and plain schemas", function()
    assert.is_true(S.check(S.object { a = S.array(S.enum { "x" }), b = S.optional(S.number { minimum = 0 }) }))
    assert.is_true(S.check({}))
    assert.is_true(S.check(true))
    assert.is_true(S.check({ type = { "string", "null" }, anyOf = { { maxLength = 2 }, { minLength = 5 } } }))
    assert.is_true(S.check({ type = "object", required = {} }))
  end)

  it("reports problems with a schema path", function()
    assert.equal('schema: must be a schema (table or boolean), got string', check_msg("string"))
    assert.equal('type: unknown type "strin" (expected object, array, string, integer, number, boolean or null)',
      check_msg({ type = "strin" }))
    assert.equal('type[2]: unknown type "nil" (expected object, array, string, integer, number, boolean or null)',
      check_msg({ type = { "string", "nil" } }))
    assert.equal('type: must be a type name or a non-empty list of type names', check_msg({ type = {} }))
    assert.equal('type: "string" is listed twice', check_msg({ type = { "string", "string" } }))
    assert.equal("minLength: must be a non-negative integer, got -1", check_msg({ minLength = -1 }))
    assert.equal("maxItems: must be a non-negative integer, got 1.5", check_msg({ maxItems = 1.5 }))
    assert.equal("minLength: 5 is greater than maxLength 3", check_msg({ minLength = 5, maxLength = 3 }))
    assert.equal("minimum: no number is >= 5 and <= 3", check_msg({ minimum = 5, maximum = 3 }))
    assert.equal("exclusiveMinimum: no number is > 5 and <= 5", check_msg({ exclusiveMinimum = 5, maximum = 5 }))
    assert.equal("exclusiveMinimum: must be a number (the draft-04 boolean form is not supported)",
      check_msg({ minimum = 1, exclusiveMinimum = true }))
    assert.equal("pattern: invalid regular expression /[a-/: missing terminating ] for character class at offset 3",
      check_msg({ pattern = "[a-" }))
    assert.is_nil(check_msg({ pattern = "(a)\\1" }))
    assert.is_nil(check_msg({ pattern = "(?=a)" }))
    assert.equal("pattern: must be a string, got 1", check_msg({ pattern = 1 }))
    assert.equal("properties: must be a table of schemas keyed by property name",
      check_msg({ properties = { { type = "string" } } }))
    assert.equal("properties: must be a table of schemas keyed by property name", check_msg({ properties = 1 }))
    assert.equal("properties.a: must be a schema (table or boolean), got string",
      check_msg({ properties = { a = "string" } }))
    assert.equal('required[1]: must be a string, got 1', check_msg({ required = { 1 } }))
    assert.equal('required: "a" is listed twice', check_msg({ required = { "a", "a" } }))
    assert.equal("required: must be a list of property names", check_msg({ required = "a" }))
    assert.equal("items: must be a schema (the list/tuple form is not supported)",
      check_msg({ items = { { type = "string" } } }))
    assert.equal("enum: must be a non-empty list", check_msg({ enum = {} }))
    assert.equal("anyOf: must be a non-empty list of schemas", check_msg({ anyOf = {} }))
    assert.equal('anyOf[2].type: unknown type "x" (expected object, array, string, integer, number, boolean or null)',
      check_msg({ anyOf = { { type = "string" }, { type = "x" } } }))
    assert.equal("additionalProperties: must be a boolean or a schema, got string",
      check_msg({ additionalProperties = "no" }))
    assert.equal("additionalProperties.minLength: must be a non-negative integer, got -2",
      check_msg({ additionalProperties = { minLength = -2 } }))
  end)

  it("reports unknown keywords, with a hint for case slips", function()
    assert.equal("foo: unknown keyword", check_msg({ type = "string", foo = 1 }))
    assert.equal("properties.a.maxlength: unknown keyword (did you mean maxLength?)",
      check_msg({ properties = { a = { maxlength = 3 } } }))
    assert.equal("$ref: unknown keyword", check_msg({ ["$ref"] = "#/x" }))
    assert.equal("schema: must be a schema table with keyword keys, got key 1", check_msg({ "string" }))
  end)

  it("reports keywords that cannot apply to the declared type", function()
    assert.equal('minLength: does not apply to type "integer"', check_msg({ type = "integer", minLength = 1 }))
    assert.equal('properties.n.minimum: does not apply to type "string"',
      check_msg({ properties = { n = { type = "string", minimum = 1 } } }))
    assert.equal('items: does not apply to type ["object", "null"]',
      check_msg({ type = { "object", "null" }, items = {} }))
    assert.is_true(S.check({ type = "integer", minimum = 1 }))
  end)

  it("guards against cycles", function()
    local s = { type = "object", properties = {} }
    s.properties.self = s
    local m = check_msg(s)
    assert.truthy(m:find("is nested too deeply", 1, true))
  end)

  it("is_schema", function()
    assert.is_true(S.is_schema(S.string()))
    assert.is_true(S.is_schema({ type = "object" }))
    assert.is_true(S.is_schema(false))
    assert.is_false(S.is_schema({ type = "bogus" }))
    assert.is_false(S.is_schema("string"))
  end)
end)

describe("core.regex_compile (schema patterns on PCRE2)", function()
  local function test(p, s)
    local re = assert(core.regex_compile(p))
    return re:test(s)
  end

  local function compile_error(p)
    local re, err = core.regex_compile(p)
    assert.is_nil(re)
    return err
  end

  it("literals and unanchored search", function()
    assert.is_true(test("abc", "xxabcxx"))
    assert.is_false(test("abc", "abxc"))
    assert.is_true(test("", "anything"))
  end)

  it("anchors", function()
    assert.is_true(test("^abc$", "abc"))
    assert.is_false(test("^abc$", "abcd"))
    assert.is_false(test("^abc$", "xabc"))
    assert.is_true(test("c$", "abc"))
    assert.is_true(test("^$", ""))
    assert.is_true(test("x|^$", ""))
    assert.is_false(test("^a|b$", "ca"))
  end)

  it("dot", function()
    assert.is_true(test("^a.c$", "abc"))
    assert.is_false(test("^a.c$", "a\nc"))
    assert.is_true(test("^.$", "é"))
    assert.is_true(test("^.{2}$", "日本"))
  end)

  it("character classes", function()
    assert.is_true(test("^[a-z0-9_-]+$", "ab-c_9"))
    assert.is_false(test("^[a-z0-9_-]+$", "ab c"))
    assert.is_false(test("[^abc]", "abc"))
    assert.is_true(test("[^abc]", "abcd"))
    assert.is_true(test("^[-a]+$", "-a-"))
    assert.is_true(test("^[é-ü]$", "ö"))
    assert.is_true(test("^[\\d-z]+$", "1-z"))
    assert.is_true(test("^[^\\W\\d]+$", "abc"))
    assert.is_false(test("^[^\\W\\d]+$", "ab1"))
    assert.is_false(test("^[]$", "a"))
    assert.is_true(test("^[^]$", "\n"))
    assert.is_true(test("^[.]$", "."))
    assert.is_false(test("^[.]$", "a"))
  end)

  it("escapes", function()
    assert.is_true(test("^\\d{3}-\\d{4}$", "555-1234"))
    assert.is_false(test("^\\d+$", "12a"))
    assert.is_true(test("^\\w+$", "a_Z9"))
    assert.is_false(test("^\\w+$", "a-b"))
    assert.is_true(test("^\\s+$", " \t\n"))
    assert.is_false(test("^\\S+$", "a b"))
    assert.is_true(test("^\\D\\W$", "a-"))
    assert.is_true(test("^a\\.b$", "a.b"))
    assert.is_false(test("^a\\.b$", "axb"))
    assert.is_true(test("^\\\\$", "\\"))
    assert.is_true(test("^\\/api\\/v1$", "/api/v1"))
    assert.is_true(test("^\\-\\+\\*\\?\\(\\)\\[\\]\\{\\}\\|\\^\\$$", "-+*?()[]{}|^$"))
    assert.is_true(test("^\\t\\n$", "\t\n"))
    assert.is_true(test("^\\x41\\u00e9$", "Aé"))
    assert.is_true(test("^\\uD83D\\uDE00$", "😀"))
    assert.is_true(test("\\bfoo\\b", "a foo b"))
    assert.is_false(test("\\bfoo\\b", "afoob"))
    assert.is_true(test("\\Boo", "foo"))
  end)

  it("groups and alternation", function()
    assert.is_true(test("^(cat|dog)s?$", "dogs"))
    assert.is_false(test("^(cat|dog)s?$", "cow"))
    assert.is_true(test("^(?:ab)+$", "ababab"))
    assert.is_false(test("^(?:ab)+$", "ababa"))
    assert.is_true(test("^(?<year>\\d{4})-(\\d{2})$", "2024-05"))
    assert.is_true(test("^(a|b|)c$", "c"))
    assert.is_true(test("^(https?|ftp)://[^/]+(/.*)?$", "https://example.com/x"))
  end)

  it("quantifiers", function()
    assert.is_true(test("^a*$", ""))
    assert.is_true(test("^a+$", "aaa"))
    assert.is_false(test("^a+$", ""))
    assert.is_true(test("^ab?c$", "ac"))
    assert.is_true(test("^a{3}$", "aaa"))
    assert.is_false(test("^a{3}$", "aa"))
    assert.is_true(test("^a{2,}$", "aaaaa"))
    assert.is_false(test("^a{2,}$", "a"))
    assert.is_true(test("^a{2,3}$", "aaa"))
    assert.is_false(test("^a{2,3}$", "aaaa"))
    assert.is_true(test("^a{0}b$", "b"))
    assert.is_true(test("^a.*?b$", "axxbxb"))
    assert.is_true(test("^a+?b$", "aaab"))
    assert.is_true(test("^a{", "a{"))       -- a brace that is no quantifier is literal
    assert.is_true(test("^x{1,2}?y$", "xxy"))
  end)

  it("reports match positions", function()
    local re = assert(core.regex_compile("b+"))
    assert.are.same({ 2, 3 }, { re:exec("abbc") })
    assert.are.same({ 2, 2 }, { assert(core.regex_compile("b+?")):exec("abbc") })
    assert.is_false(re:exec("ac"))
  end)

  it("empty loops terminate", function()
    assert.is_true(test("^(a*)*$", "aaaa"))
    assert.is_false(test("^(a*)*b$", "aaaac"))
    assert.is_true(test("^(a|)*$", "aaa"))
    assert.is_true(test("^(?:)*x$", "x"))
  end)

  it("catastrophic backtracking hits the match limit", function()
    local re = assert(core.regex_compile("^(a+)+$"))
    local ok, err = re:test(string.rep("a", 30) .. "b")
    assert.is_nil(ok)
    assert.equal("too costly to check", err)
    ok, err = assert(core.regex_compile("(x+x+)+y")):test(string.rep("x", 40) .. "zy")
    assert.is_nil(ok)
    assert.equal("too costly to check", err)
  end)

  -- The hostile cases of issue 8: a 1 MiB subject that almost matches. Each
  -- call must end (matched, not matched, or the limit), never run for seconds;
  -- tests/bench measures how long the worst of them takes.
  it("1 MiB hostile subjects end at the limit", function()
    local mib = 1024 * 1024
    local cases = {
      { "^(a+)+$", string.rep("a", mib) .. "!" },
      { "^([a-z0-9]+-?)*$", string.rep("a", mib) .. "!" },
      { "^([a-z0-9]+-?)*$", string.rep("ab-", mib // 3) .. "!" },
      { "^(\\w+\\s?)*$", string.rep("word ", mib // 5) .. "!" },
    }
    for _, c in ipairs(cases) do
      local ok, err = assert(core.regex_compile(c[1])):test(c[2])
      assert.is_nil(ok, c[1])
      assert.equal("too costly to check", err)
    end
    -- the same patterns on matching subjects of that size still answer
    assert.is_true(test("^(a+)+$", string.rep("a", mib)))
    assert.is_true(test("^[a-z0-9-]*$", string.rep("ab-", mib // 3)))
  end)

  it("lookahead and lookbehind", function()
    assert.is_true(test("^(?=.*\\d)(?=.*[a-z]).{8,}$", "passw0rd"))
    assert.is_false(test("^(?=.*\\d)(?=.*[a-z]).{8,}$", "password"))
    assert.is_true(test("^foo(?!bar)", "foobaz"))
    assert.is_false(test("^foo(?!bar)", "foobar"))
    assert.is_true(test("(?<=\\$)\\d+", "cost: $42"))
    assert.is_false(test("(?<=\\$)\\d+", "cost: 42"))
    assert.is_true(test("(?<!-)\\b\\d+$", "x 42"))
    assert.is_false(test("^(?<!a)b", "ab"))
  end)

  it("backreferences", function()
    assert.is_true(test("^(a+)b\\1$", "aabaa"))
    assert.is_false(test("^(a+)b\\1$", "aaba"))
    assert.is_true(test("^(?<q>['\"]).*\\k<q>$", "'hi'"))
    assert.is_false(test("^(?<q>['\"]).*\\k<q>$", "'hi\""))
    assert.is_true(test("\\b(\\w+) \\1\\b", "it is is here"))
    -- as in JavaScript, a group that did not take part matches empty
    assert.is_true(test("^(?:(a)|b)\\1$", "b"))
    assert.is_true(test("^\\1(a)$", "a"))
  end)

  it("ECMA-262 details PCRE2 differs on", function()
    assert.is_false(test("^.$", "\r"))          -- . excludes \n \r U+2028 U+2029
    assert.is_false(test("^.$", "\u{2028}"))
    assert.is_true(test("^.$", "\v"))
    assert.is_true(test("^\\s$", "\u{a0}"))    -- \s is Unicode white space and U+FEFF
    assert.is_true(test("^\\s$", "\u{feff}"))
    assert.is_false(test("^\\S$", "\u{3000}"))
    assert.is_true(test("^[\\s]$", "\u{2003}"))
    assert.is_true(test("^[^\\S]$", " "))
    assert.is_true(test("^\\v$", "\v"))       -- \v is the vertical tab, not a class
    assert.is_false(test("^\\v$", "\n"))
    assert.is_false(test("^\\d$", "\u{663}"))  -- \d \w are ASCII
    assert.is_false(test("^\\w$", "é"))
    assert.is_false(test("^a$", "a\n"))         -- $ only at the very end
    assert.is_true(test("^\\u{1F600}$", "😀"))
    assert.is_true(test("^[[:a]+$", "[:a"))     -- [ in a class is a literal, not POSIX
    assert.is_false(test("^a", "a\255") == nil)  -- invalid UTF-8 in a subject is no error
    assert.is_false(test("^.$", "\255"))
  end)

  it("long subjects do not overflow", function()
    assert.is_true(test("^[a-z]*$", string.rep("a", 200000)))
    assert.is_true(test("^(?:ab|cd)*$", string.rep("ab", 50000)))
  end)

  it("refuses malformed syntax with PCRE2's message and offset", function()
    assert.equal("missing closing parenthesis at offset 2", compile_error("(a"))
    assert.equal("missing terminating ] for character class at offset 4", compile_error("x[ab"))
    assert.equal("quantifier does not follow a repeatable item at offset 0", compile_error("*a"))
    assert.equal("range out of order in character class at offset 3", compile_error("[z-a]"))
    assert.equal("numbers out of order in {} quantifier at offset 5", compile_error("a{3,2}"))
    assert.equal("\\ at end of pattern at offset 2", compile_error("a\\"))
    assert.equal("unrecognized character follows \\ at offset 1", compile_error("\\q"))
    assert.equal("reference to non-existent subpattern at offset 4", compile_error("(a)\\2"))
    assert.truthy(compile_error("a\255"):find("^UTF%-8 error"))
    -- offsets count bytes of the pattern as written, before any rewriting
    assert.equal("missing closing parenthesis at offset 6", compile_error("\\s.\\v("))
  end)
end)
