-- Helpers the example tools call from their steps (never from a workflow
-- body: a body is replayed, these touch the file system and spawn processes).
local M = {}

local function shell_quote(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end
M.shell_quote = shell_quote

--- Lines of `cmd`'s output, or raises with its exit status.
function M.run(cmd)
  local p = assert(io.popen(cmd .. " 2>&1", "r"))
  local out = {}
  for line in p:lines() do out[#out + 1] = line end
  local ok, how, code = p:close()
  if not ok then
    error(("command failed (%s %s): %s\n%s"):format(how, tostring(code), cmd, table.concat(out, "\n")))
  end
  return out
end

--- { {path=, lines=}, ... } for the Lua files under dir, counted with wc.
function M.line_counts(dir)
  local files = {}
  for _, line in ipairs(M.run("find " .. shell_quote(dir) .. " -name '*.lua' -type f | sort")) do
    local n = M.run("wc -l < " .. shell_quote(line))[1]
    files[#files + 1] = { path = line, lines = math.tointeger(tonumber(n)) }
  end
  return files
end

function M.write(path, text)
  local dir = path:match("^(.*)/[^/]*$")
  if dir then M.run("mkdir -p " .. shell_quote(dir)) end
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
  return path
end

return M
