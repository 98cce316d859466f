-- The token file (issue 12): written through a temporary file whose name
-- nobody can guess, so a link planted at a predictable name (the token file
-- sits beside the database, which --db may put in a directory others can
-- write) cannot make moor truncate and overwrite the file it points at; and
-- shared by every moor whose database is in that directory (or that names
-- the same $MOOR_TOKENS), so a write keeps what another process wrote.
local tokens = require "moor.auth.tokens"
local conf = require "moor.conf"

local function read(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

describe("the token file", function()
  local saved
  local dir
  before_each(function()
    saved = conf.tokens_path
    local p = io.popen("mktemp -d")
    dir = p:read("l")
    p:close()
    conf.tokens_path = dir .. "/tokens.json"
    tokens.reset()
  end)
  after_each(function()
    conf.tokens_path = saved
    tokens.reset()
    os.execute("rm -rf '" .. dir .. "'")
  end)

  it("is not written through a link planted at a predictable temporary name", function()
    local victim = dir .. "/victim.txt"
    local f = assert(io.open(victim, "wb"))
    f:write("precious")
    f:close()
    assert(os.execute(("ln -s '%s' '%s'"):format(victim, conf.tokens_path .. ".tmp")))
    assert(tokens.put("c", "alice", { access_token = "tok-secret" }))
    assert.are.equal("precious", read(victim))
    assert.is_truthy(read(conf.tokens_path):find("tok-secret", 1, true))
    local p = io.popen("stat -c %a '" .. conf.tokens_path .. "'")
    assert.are.equal("600", p:read("l"))
    p:close()
    -- no temporary file is left behind
    p = io.popen("ls -A '" .. dir .. "'")
    local names = p:read("a")
    p:close()
    assert.are.equal("tokens.json\ntokens.json.tmp\nvictim.txt\n", names)
  end)

  it("a write keeps what another process wrote since this one last read the file", function()
    assert(tokens.put("c", "alice", { access_token = "alice-tok" }))
    assert.is_table(tokens.get("c", "alice"))
    -- another moor (a database beside this one) stores bob's token meanwhile
    local text = read(conf.tokens_path)
    local other = text:gsub('"tokens":{', '"tokens":{"c\\u0000bob":{"access_token":"bob-tok"},', 1)
    local tmp = conf.tokens_path .. ".other"
    local f = assert(io.open(tmp, "wb"))
    f:write(other)
    f:close()
    assert(os.rename(tmp, conf.tokens_path))
    assert.are.equal("bob-tok", (tokens.get("c", "bob") or {}).access_token)
    assert(tokens.put("c", "carol", { access_token = "carol-tok" }))
    local now = read(conf.tokens_path)
    for _, who in ipairs { "alice-tok", "bob-tok", "carol-tok" } do
      assert.is_truthy(now:find(who, 1, true), who .. " in " .. now)
    end
  end)

  it("a file that is not moor's JSON is not written over", function()
    local f = assert(io.open(conf.tokens_path, "wb"))
    f:write("{ hand-edited")
    f:close()
    local ok, err = tokens.put("c", "alice", { access_token = "alice-tok" })
    assert.is_nil(ok)
    assert.is_truthy(err:find("is not moor's JSON", 1, true), err)
    assert.are.equal("{ hand-edited", read(conf.tokens_path))
  end)
end)
