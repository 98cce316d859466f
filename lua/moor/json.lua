--- moor.json: lossless JSON (host/json.c). Integers stay integers across all
-- 64 bits, floats round-trip exactly, `null` is the same value as cjson.null,
-- and decoded arrays carry a marker so `[]` survives a round trip.
-- Use json.array{} to mark an empty table as an array.
local core = require "moor.json.core"

local M = {
  encode = core.encode,   -- encode(v [, maxbytes [, root]]) -> text | nil, message, kind
  decode = core.decode,   -- decode(text) -> value | nil, message
  null = core.null,
  array = core.array,
  isarray = core.isarray,
}

return M
