--- MCP over standard input and output (`moor mcp`, host/mcp_stdio.c): one
-- JSON-RPC message a line each way; write(line) puts a line on the real stdout.
local json = require "moor.json"
local server = require "moor.mcp.server"

local M = {}

local current

function M.start(write)
  current = server.new(function(msg) write(json.encode(msg)) end)
end

function M.line(text, overlong)
  if current then current.receive(text, overlong) end
end

function M.closed()
  if current then current.close() end
  current = nil
end

return M
