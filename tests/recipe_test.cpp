// Recipes: parsing and schema checks, composition through bases, --set
// overrides, the error messages (file, line, key, one line), and the
// to_toml() round trip.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"
#include "train/recipe.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

// The schema of these tests: every type, with and without defaults, one
// required key.
std::vector<KeySpec> test_schema() {
  return {
      {"run.name", KeyType::String, "\"default-run\"", "name of the run"},
      {"run.tags", KeyType::StringList, "[]", "free-form tags"},
      {"run.notes", KeyType::String, "", "optional notes (no default)"},
      {"model.dim", KeyType::Int, "", "model width", true},
      {"model.layers", KeyType::Int, "6", "number of layers"},
      {"training.steps", KeyType::Int, "1000", "optimizer steps"},
      {"training.lr", KeyType::Float, "3e-4", "peak learning rate"},
      {"training.warmup", KeyType::Float, "0", "warm-up fraction (integer default)"},
      {"training.compile", KeyType::Bool, "false", "a boolean"},
  };
}

// Runs `body`, expects a strata::Error, and returns its message; the message
// must be one line.
std::string error_of(const std::function<void()>& body) {
  try {
    body();
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "not one line: " << msg;
    return msg;
  }
  ADD_FAILURE() << "no strata::Error thrown";
  return "";
}

Recipe parse(const std::string& text, const std::vector<std::string>& sets = {}) {
  return Recipe::from_string(text, "test.toml", test_schema(), sets);
}

std::string parse_error(const std::string& text, const std::vector<std::string>& sets = {}) {
  return error_of([&] { parse(text, sets); });
}

// Each test gets a fresh directory under /tmp for its recipe files.
class RecipeFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/strata_recipe_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  // Writes `text` to dir/rel (creating subdirectories); returns the full path.
  std::string write(const std::string& rel, const std::string& text) {
    const fs::path p = dir_ / rel;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
    return p.string();
  }
  Recipe load(const std::string& rel, const std::vector<std::string>& sets = {}) {
    return Recipe::load((dir_ / rel).string(), sets, test_schema());
  }
  std::string load_error(const std::string& rel) {
    return error_of([&] { load(rel); });
  }
  std::string path(const std::string& rel) const { return (dir_ / rel).string(); }

  fs::path dir_;
};

// Changes the working directory for one test and restores it.
class ScopedCwd {
 public:
  explicit ScopedCwd(const fs::path& dir) : old_(fs::current_path()) { fs::current_path(dir); }
  ~ScopedCwd() { fs::current_path(old_); }

 private:
  fs::path old_;
};

// ---------------------------------------------------------------------------
// Types and defaults
// ---------------------------------------------------------------------------

TEST(Recipe, ParsesEveryType) {
  const Recipe r = parse(
      "[run]\n"
      "name = \"tiny\"\n"
      "tags = [\"a\", \"b c\"]\n"
      "[model]\n"
      "dim = 288\n"
      "[training]\n"
      "lr = 1e-3\n"
      "warmup = 2\n"  // an integer is accepted for a float key
      "compile = true\n");
  EXPECT_EQ(r.get_string("run.name"), "tiny");
  EXPECT_EQ(r.get_strings("run.tags"), (std::vector<std::string>{"a", "b c"}));
  EXPECT_EQ(r.get_int("model.dim"), 288);
  EXPECT_EQ(r.get_float("training.lr"), 1e-3);
  EXPECT_EQ(r.get_float("training.warmup"), 2.0);
  EXPECT_TRUE(r.get_bool("training.compile"));
}

TEST(Recipe, DefaultsFillUnsetKeys) {
  const Recipe r = parse("[model]\ndim = 64\n");
  EXPECT_EQ(r.get_string("run.name"), "default-run");
  EXPECT_TRUE(r.get_strings("run.tags").empty());
  EXPECT_EQ(r.get_int("model.layers"), 6);
  EXPECT_EQ(r.get_int("training.steps"), 1000);
  EXPECT_EQ(r.get_float("training.lr"), 3e-4);
  EXPECT_EQ(r.get_float("training.warmup"), 0.0);
  EXPECT_FALSE(r.get_bool("training.compile"));
  // A key with neither value nor default.
  EXPECT_FALSE(r.has("run.notes"));
  EXPECT_TRUE(r.has("run.name"));
  EXPECT_EQ(r.where("run.notes"), "unset");
}

TEST(Recipe, EmptyListIsFine) {
  const Recipe r = parse("[run]\ntags = []\n[model]\ndim = 1\n");
  EXPECT_TRUE(r.get_strings("run.tags").empty());
  EXPECT_TRUE(r.given("run.tags"));
}

TEST(Recipe, GetterMisuseIsAnError) {
  const Recipe r = parse("[model]\ndim = 64\n");
  std::string msg = error_of([&] { r.get_int("training.stepz"); });
  EXPECT_NE(msg.find("'training.stepz'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("not a key of the recipe schema"), std::string::npos) << msg;
  EXPECT_NE(msg.find("did you mean 'training.steps'?"), std::string::npos) << msg;
  msg = error_of([&] { r.get_int("training.lr"); });
  EXPECT_NE(msg.find("get_int('training.lr')"), std::string::npos) << msg;
  EXPECT_NE(msg.find("a float, not an integer"), std::string::npos) << msg;
  msg = error_of([&] { r.get_string("run.notes"); });
  EXPECT_NE(msg.find("'run.notes'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("no value"), std::string::npos) << msg;
  msg = error_of([&] { r.has("nope.nope"); });
  EXPECT_NE(msg.find("'nope.nope'"), std::string::npos) << msg;
  // An integer key reads as a float too.
  EXPECT_EQ(r.get_float("model.dim"), 64.0);
}

TEST(Recipe, SchemaMistakesNameTheSchema) {
  auto with = [](const KeySpec& spec) {
    return error_of([&] { Recipe::from_string("", "x", {spec}); });
  };
  std::string msg = with({"training.steps", KeyType::Int, "\"many\"", ""});
  EXPECT_NE(msg.find("schema"), std::string::npos) << msg;
  EXPECT_NE(msg.find("training.steps: expected an integer, got a string"), std::string::npos)
      << msg;
  msg = with({"training.steps", KeyType::Int, "1 2", ""});
  EXPECT_NE(msg.find("schema"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'training.steps'"), std::string::npos) << msg;
  msg = with({"steps", KeyType::Int, "1", ""});
  EXPECT_NE(msg.find("schema"), std::string::npos) << msg;
  msg = with({"a.b.c", KeyType::Int, "1", ""});
  EXPECT_NE(msg.find("schema"), std::string::npos) << msg;
  msg = error_of([] {
    Recipe::from_string("", "x", {{"a.b", KeyType::Int, "", ""}, {"a.b", KeyType::Int, "", ""}});
  });
  EXPECT_NE(msg.find("declared twice"), std::string::npos) << msg;
}

// ---------------------------------------------------------------------------
// Composition
// ---------------------------------------------------------------------------

TEST_F(RecipeFiles, BaseChainOverridesKeyByKey) {
  write("base.toml",
        "[model]\n"
        "dim = 64\n"
        "layers = 2\n"
        "[training]\n"
        "steps = 10\n"
        "lr = 0.5\n");
  write("mid.toml",
        "base = \"base.toml\"\n"
        "[training]\n"
        "steps = 20\n");
  write("child.toml",
        "base = \"mid.toml\"\n"
        "\n"
        "[model]\n"
        "layers = 4\n");
  const Recipe r = load("child.toml");
  EXPECT_EQ(r.get_int("model.dim"), 64);       // from the base of the base
  EXPECT_EQ(r.get_int("model.layers"), 4);     // child over base
  EXPECT_EQ(r.get_int("training.steps"), 20);  // mid over base
  EXPECT_EQ(r.get_float("training.lr"), 0.5);  // only in base
  EXPECT_EQ(r.get_string("run.name"), "default-run");
  EXPECT_EQ(r.files(),
            (std::vector<std::string>{path("child.toml"), path("mid.toml"), path("base.toml")}));
  EXPECT_EQ(r.where("model.layers"), path("child.toml") + ":4");
  EXPECT_EQ(r.where("training.steps"), path("mid.toml") + ":3");
  EXPECT_EQ(r.where("model.dim"), path("base.toml") + ":2");
}

TEST_F(RecipeFiles, BasePathIsRelativeToTheNamingFile) {
  write("common/base.toml", "[model]\ndim = 32\n");
  write("common/extra/more.toml", "base = \"../base.toml\"\n[training]\nsteps = 7\n");
  write("runs/sub/run.toml", "base = \"../../common/extra/more.toml\"\n[run]\nname = \"r\"\n");
  const Recipe r = load("runs/sub/run.toml");
  EXPECT_EQ(r.get_int("model.dim"), 32);
  EXPECT_EQ(r.get_int("training.steps"), 7);
  EXPECT_EQ(r.get_string("run.name"), "r");
  EXPECT_EQ(r.files(),
            (std::vector<std::string>{path("runs/sub/run.toml"), path("common/extra/more.toml"),
                                      path("common/base.toml")}));
}

TEST_F(RecipeFiles, PathsStayAsTheUserGaveThem) {
  write("recipes/base.toml", "[model]\ndim = 8\n");
  write("recipes/x.toml", "base = \"base.toml\"\n[training]\n\nsteps = 3\n");
  const ScopedCwd cwd(dir_);
  const Recipe r = Recipe::load("recipes/x.toml", {}, test_schema());
  EXPECT_EQ(r.where("training.steps"), "recipes/x.toml:4");
  EXPECT_EQ(r.where("model.dim"), "recipes/base.toml:2");
  EXPECT_EQ(r.files(), (std::vector<std::string>{"recipes/x.toml", "recipes/base.toml"}));
}

TEST_F(RecipeFiles, FromStringResolvesBaseInBaseDir) {
  write("lib/base.toml", "[model]\ndim = 16\nlayers = 3\n");
  const Recipe r = Recipe::from_string("base = \"base.toml\"\n[model]\nlayers = 5\n", "inline",
                                       test_schema(), {}, path("lib"));
  EXPECT_EQ(r.get_int("model.dim"), 16);
  EXPECT_EQ(r.get_int("model.layers"), 5);
  EXPECT_EQ(r.files(), (std::vector<std::string>{"inline", path("lib/base.toml")}));
  EXPECT_EQ(r.where("model.layers"), "inline:3");
}

TEST_F(RecipeFiles, BaseCycleNamesTheFiles) {
  write("a.toml", "base = \"b.toml\"\n[model]\ndim = 1\n");
  write("b.toml", "base = \"a.toml\"\n");
  std::string msg = load_error("a.toml");
  EXPECT_NE(msg.find("cycle"), std::string::npos) << msg;
  EXPECT_NE(msg.find(path("a.toml") + " -> " + path("b.toml") + " -> " + path("a.toml")),
            std::string::npos)
      << msg;
  EXPECT_EQ(msg.rfind(path("b.toml") + ":1: ", 0), 0u) << msg;

  write("self.toml", "base = \"./self.toml\"\n");
  msg = load_error("self.toml");
  EXPECT_NE(msg.find("cycle"), std::string::npos) << msg;
  EXPECT_NE(msg.find(path("self.toml") + " -> " + path("self.toml")), std::string::npos) << msg;
}

TEST_F(RecipeFiles, MissingBaseNamesPathAndReferrer) {
  write("sub/x.toml", "# a comment\n\nbase = \"nothere.toml\"\n[model]\ndim = 1\n");
  const std::string msg = load_error("sub/x.toml");
  EXPECT_EQ(msg.rfind(path("sub/x.toml") + ":3: ", 0), 0u) << msg;
  EXPECT_NE(msg.find("'" + path("sub/nothere.toml") + "'"), std::string::npos) << msg;
}

TEST_F(RecipeFiles, MissingRecipeNamesPath) {
  std::string msg = load_error("absent.toml");
  EXPECT_NE(msg.find("'" + path("absent.toml") + "'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("no such file"), std::string::npos) << msg;
  fs::create_directories(dir_ / "adir");
  msg = load_error("adir");
  EXPECT_NE(msg.find("directory"), std::string::npos) << msg;
}

TEST(Recipe, BaseMustBeAString) {
  const std::string msg = parse_error("base = 3\n");
  EXPECT_EQ(msg.rfind("test.toml:1: base: expected a string", 0), 0u) << msg;
}

// ---------------------------------------------------------------------------
// --set
// ---------------------------------------------------------------------------

TEST(Recipe, SetOverridesAreTyped) {
  const Recipe r =
      parse("[model]\ndim = 64\n[training]\nsteps = 5\n",
            {"training.steps=100", "training.lr=3e-4", "training.compile=true",
             "run.name=\"quoted text\"", "run.tags=[\"x\", \"y\"]", " model.layers = 12"});
  EXPECT_EQ(r.get_int("training.steps"), 100);
  EXPECT_EQ(r.get_float("training.lr"), 3e-4);
  EXPECT_TRUE(r.get_bool("training.compile"));
  EXPECT_EQ(r.get_string("run.name"), "quoted text");
  EXPECT_EQ(r.get_strings("run.tags"), (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(r.get_int("model.layers"), 12);
  EXPECT_EQ(r.where("training.steps"), "--set");
  EXPECT_TRUE(r.given("training.steps"));
}

TEST(Recipe, SetTakesBareStrings) {
  const Recipe a = parse("[model]\ndim = 1\n", {"run.name=my run/1"});
  EXPECT_EQ(a.get_string("run.name"), "my run/1");
  const Recipe b = parse("[model]\ndim = 1\n", {"run.notes="});
  EXPECT_EQ(b.get_string("run.notes"), "");
  // A string key keeps the text even when it reads as another TOML type.
  const Recipe c = parse("[model]\ndim = 1\n", {"run.name=2024"});
  EXPECT_EQ(c.get_string("run.name"), "2024");
  // The last --set of a key wins.
  const Recipe d = parse("[model]\ndim = 1\n", {"model.dim=2", "model.dim=3"});
  EXPECT_EQ(d.get_int("model.dim"), 3);
}

TEST(Recipe, SetErrorsNameTheArgument) {
  std::string msg = parse_error("[model]\ndim = 1\n", {"training.steps"});
  EXPECT_EQ(msg.rfind("--set 'training.steps': ", 0), 0u) << msg;
  EXPECT_NE(msg.find("section.key=value"), std::string::npos) << msg;

  msg = parse_error("[model]\ndim = 1\n", {"training.stpes=5"});
  EXPECT_EQ(msg.rfind("--set 'training.stpes=5': unknown key 'training.stpes'", 0), 0u) << msg;
  EXPECT_NE(msg.find("(did you mean 'training.steps'?)"), std::string::npos) << msg;

  msg = parse_error("[model]\ndim = 1\n", {"training.steps=abc"});
  EXPECT_EQ(msg, "--set 'training.steps=abc': training.steps: expected an integer, got a string");

  msg = parse_error("[model]\ndim = 1\n", {"run.tags=a"});
  EXPECT_EQ(msg, "--set 'run.tags=a': run.tags: expected a list of strings, got a string");
}

TEST(Recipe, SetSatisfiesRequired) {
  const Recipe r = parse("", {"model.dim=9"});
  EXPECT_EQ(r.get_int("model.dim"), 9);
}

// ---------------------------------------------------------------------------
// Errors in recipe files
// ---------------------------------------------------------------------------

TEST_F(RecipeFiles, UnknownKeyHasLineAndSuggestion) {
  write("x.toml",
        "[model]\n"
        "dim = 4\n"
        "[training]\n"
        "stpes = 100\n");
  EXPECT_EQ(load_error("x.toml"),
            path("x.toml") + ":4: unknown key 'training.stpes' (did you mean 'training.steps'?)");
}

TEST(Recipe, UnknownKeySuggestions) {
  // Nothing close: no suggestion.
  std::string msg = parse_error("[model]\ndim = 1\nfrobnicator = 2\n");
  EXPECT_EQ(msg, "test.toml:3: unknown key 'model.frobnicator'");
  // The right key in the wrong section.
  msg = parse_error("[model]\ndim = 1\nsteps = 2\n");
  EXPECT_EQ(msg, "test.toml:3: unknown key 'model.steps' (did you mean 'training.steps'?)");
  // A misspelt section.
  msg = parse_error("[model]\ndim = 1\n[trainig]\nlr = 0.1\n");
  EXPECT_EQ(msg, "test.toml:4: unknown key 'trainig.lr' (did you mean 'training.lr'?)");
  // An empty section that the schema does not know.
  msg = parse_error("[model]\ndim = 1\n[optim]\n");
  EXPECT_EQ(msg, "test.toml:3: unknown section [optim]");
}

TEST(Recipe, FirstProblemInFileOrderIsReported) {
  // toml++ iterates keys alphabetically; the error must still be the first line.
  const std::string msg = parse_error("[training]\nzzz = 1\naaa = 2\n");
  EXPECT_EQ(msg.rfind("test.toml:2: unknown key 'training.zzz'", 0), 0u) << msg;
}

TEST(Recipe, WrongTypeHasLine) {
  EXPECT_EQ(parse_error("[model]\ndim = 1\n[training]\nsteps = \"many\"\n"),
            "test.toml:4: training.steps: expected an integer, got a string");
  EXPECT_EQ(parse_error("[model]\ndim = 2.5\n"),
            "test.toml:2: model.dim: expected an integer, got a float");
  EXPECT_EQ(parse_error("[model]\ndim = 1\n[training]\nlr = true\n"),
            "test.toml:4: training.lr: expected a float, got a boolean");
  EXPECT_EQ(parse_error("[model]\ndim = 1\n[training]\ncompile = 1\n"),
            "test.toml:4: training.compile: expected a boolean, got an integer");
  EXPECT_EQ(parse_error("[model]\ndim = 1\n[run]\nname = [\"a\"]\n"),
            "test.toml:4: run.name: expected a string, got an array");
  EXPECT_EQ(parse_error("[model]\ndim = 1\n[run]\ntags = [\"a\", 2]\n"),
            "test.toml:4: run.tags: expected a list of strings, got an array containing an "
            "integer");
  EXPECT_EQ(parse_error("[model]\ndim = 1979-05-27\n"),
            "test.toml:2: model.dim: expected an integer, got a date");
}

TEST_F(RecipeFiles, MissingRequiredNamesKeyAndFile) {
  write("x.toml", "[training]\nsteps = 1\n");
  const std::string msg = load_error("x.toml");
  EXPECT_EQ(msg.rfind(path("x.toml") + ": missing required key 'model.dim'", 0), 0u) << msg;
}

TEST_F(RecipeFiles, SyntaxErrorHasFileLineAndColumn) {
  write("bad.toml", "[model]\ndim = 1\nlayers = = 2\n");
  const std::string msg = load_error("bad.toml");
  EXPECT_EQ(msg.rfind(path("bad.toml") + ":3:", 0), 0u) << msg;
  EXPECT_NE(msg.find("Error while parsing"), std::string::npos) << msg;  // toml++'s description
  // A syntax error in a base names the base.
  write("child.toml", "base = \"bad.toml\"\n");
  EXPECT_EQ(load_error("child.toml").rfind(path("bad.toml") + ":3:", 0), 0u);
}

TEST(Recipe, DeeperNestingIsRejected) {
  EXPECT_EQ(parse_error("[model]\ndim = 1\n\n[model.sub]\nx = 1\n"),
            "test.toml:4: model.sub: nested tables are not allowed (a recipe is [section] "
            "tables of key = value)");
  EXPECT_EQ(parse_error("[model]\ndim = 1\nsub.x = 1\n").rfind("test.toml:3: model.sub: nested", 0),
            0u);
  EXPECT_EQ(
      parse_error("[model]\ndim = 1\nsub = { x = 1 }\n").rfind("test.toml:3: model.sub: nested", 0),
      0u);
  EXPECT_EQ(parse_error("[[model]]\ndim = 1\n"),
            "test.toml:1: [[model]]: arrays of tables are not allowed (a recipe is [section] "
            "tables of key = value)");
}

TEST(Recipe, TopLevelKeysOtherThanBaseAreRejected) {
  EXPECT_EQ(parse_error("\nsteps = 1\n[model]\ndim = 1\n"),
            "test.toml:2: 'steps' is outside any [section] (the only top-level key allowed is "
            "'base')");
}

TEST(Recipe, ErrorMessagesAreOneLine) {
  // User text with line breaks (a quoted key, a --set value) is escaped.
  std::string msg = parse_error("[model]\ndim = 1\n\"a\\nb\" = 2\n");
  EXPECT_NE(msg.find("model.a\\nb"), std::string::npos) << msg;
  msg = parse_error("[model]\ndim = 1\n", {"model.dim=x\ny"});
  EXPECT_NE(msg.find("--set 'model.dim=x\\ny'"), std::string::npos) << msg;
  msg = parse_error("[model]\ndim = 1\n", {"model.dim\nx"});
  EXPECT_NE(msg.find("--set"), std::string::npos) << msg;
}

// ---------------------------------------------------------------------------
// Provenance: where(), given(), fail()
// ---------------------------------------------------------------------------

TEST(Recipe, WhereAndGiven) {
  const Recipe r = parse("[model]\ndim = 1\n\n[training]\nsteps = 2\n", {"training.lr=0.1"});
  EXPECT_EQ(r.where("model.dim"), "test.toml:2");
  EXPECT_EQ(r.where("training.steps"), "test.toml:5");
  EXPECT_EQ(r.where("training.lr"), "--set");
  EXPECT_EQ(r.where("model.layers"), "default");
  EXPECT_TRUE(r.given("model.dim"));
  EXPECT_TRUE(r.given("training.lr"));
  EXPECT_FALSE(r.given("model.layers"));
  EXPECT_FALSE(r.given("run.notes"));
}

TEST(Recipe, FailNamesWhereAndKey) {
  const Recipe r = parse("[model]\ndim = 1\n[training]\nsteps = -3\n", {"training.lr=-1"});
  EXPECT_EQ(error_of([&] { r.fail("training.steps", "must be positive"); }),
            "test.toml:4: training.steps: must be positive");
  EXPECT_EQ(error_of([&] { r.fail("training.lr", "must be positive"); }),
            "--set: training.lr: must be positive");
  // A defaulted key points at the recipe file and says it is the default.
  EXPECT_EQ(error_of([&] { r.fail("model.layers", "too many"); }),
            "test.toml: model.layers (default): too many");
}

// ---------------------------------------------------------------------------
// to_toml()
// ---------------------------------------------------------------------------

// Compares every key of two recipes by value.
void expect_same_values(const Recipe& a, const Recipe& b, const std::vector<KeySpec>& schema) {
  for (const KeySpec& k : schema) {
    SCOPED_TRACE(k.path);
    ASSERT_EQ(a.has(k.path), b.has(k.path));
    if (!a.has(k.path)) continue;
    switch (k.type) {
      case KeyType::Int:
        EXPECT_EQ(a.get_int(k.path), b.get_int(k.path));
        break;
      case KeyType::Float: {
        const double x = a.get_float(k.path), y = b.get_float(k.path);
        if (std::isnan(x)) {
          EXPECT_TRUE(std::isnan(y));
        } else {
          EXPECT_EQ(x, y);  // bit-exact, not approximate
          EXPECT_EQ(std::signbit(x), std::signbit(y));
        }
        break;
      }
      case KeyType::Bool:
        EXPECT_EQ(a.get_bool(k.path), b.get_bool(k.path));
        break;
      case KeyType::String:
        EXPECT_EQ(a.get_string(k.path), b.get_string(k.path));
        break;
      case KeyType::StringList:
        EXPECT_EQ(a.get_strings(k.path), b.get_strings(k.path));
        break;
    }
  }
}

TEST(Recipe, ToTomlRoundTripsEveryValue) {
  std::vector<KeySpec> schema = {
      {"s.quotes", KeyType::String, "", ""},
      {"s.backslash", KeyType::String, "", ""},
      {"s.newline", KeyType::String, "", ""},
      {"s.control", KeyType::String, "", ""},
      {"s.unicode", KeyType::String, "", ""},
      {"s.list", KeyType::StringList, "", ""},
      {"s.empty_list", KeyType::StringList, "[]", ""},
      {"f.a", KeyType::Float, "3e-4", ""},
      {"f.b", KeyType::Float, "0.1", ""},
      {"f.c", KeyType::Float, "1e-8", ""},
      {"f.d", KeyType::Float, "100", ""},  // integral: must stay a float
      {"f.e", KeyType::Float, "", ""},
      {"f.f", KeyType::Float, "1e300", ""},
      {"f.g", KeyType::Float, "-0.0", ""},
      {"f.h", KeyType::Float, "5e-324", ""},
      {"f.inf", KeyType::Float, "-inf", ""},
      {"f.nan", KeyType::Float, "nan", ""},
      {"i.min", KeyType::Int, "-9223372036854775808", ""},
      {"i.max", KeyType::Int, "9223372036854775807", ""},
      {"b.yes", KeyType::Bool, "true", ""},
      {"b.no", KeyType::Bool, "false", ""},
      {"x.unset", KeyType::Int, "", ""},
  };
  const std::string text =
      "[s]\n"
      "quotes = 'say \"hi\"'\n"
      "backslash = 'C:\\dir\\file'\n"
      "newline = \"two\\nlines\\r\\n\\ttabbed\"\n"
      "control = \"bell\\u0007 del\\u007F\"\n"
      "unicode = \"héllo → 世界\"\n"
      "list = [\"a\\\"b\", 'c\\d', \"\"]\n"
      "[f]\n"
      "e = 0.30000000000000004\n";
  const Recipe a = Recipe::from_string(text, "orig.toml", schema, {"f.b=0.1"});
  EXPECT_EQ(a.get_string("s.quotes"), "say \"hi\"");
  EXPECT_EQ(a.get_string("s.backslash"), "C:\\dir\\file");
  EXPECT_EQ(a.get_string("s.newline"), "two\nlines\r\n\ttabbed");
  EXPECT_EQ(a.get_float("f.e"), 0.1 + 0.2);

  const std::string out = a.to_toml();
  const Recipe b = Recipe::from_string(out, "resolved.toml", schema);
  expect_same_values(a, b, schema);
  // Printing is stable: the round trip prints the same values again.
  const Recipe c = Recipe::from_string(b.to_toml(), "again.toml", schema);
  expect_same_values(a, c, schema);

  // Short, exact float literals, and integral floats stay floats.
  EXPECT_NE(out.find("a = 3e-04\n"), std::string::npos) << out;
  EXPECT_NE(out.find("b = 0.1  # --set\n"), std::string::npos) << out;
  EXPECT_NE(out.find("c = 1e-08\n"), std::string::npos) << out;
  EXPECT_NE(out.find("d = 100.0\n"), std::string::npos) << out;
  // Header comment names the source; an unset key is left out.
  EXPECT_EQ(out.rfind("# ", 0), 0u) << out;
  EXPECT_NE(out.find("orig.toml"), std::string::npos) << out;
  EXPECT_EQ(out.find("unset"), std::string::npos) << out;
  EXPECT_EQ(out.find("[x]"), std::string::npos) << out;
}

TEST(Recipe, ToTomlFollowsSchemaOrder) {
  std::vector<KeySpec> schema = {
      {"zeta.b", KeyType::Int, "2", ""},
      {"alpha.a", KeyType::Int, "1", ""},
      {"zeta.a", KeyType::Int, "3", ""},
  };
  const std::string out = Recipe::from_string("[alpha]\na = 5\n", "x", schema).to_toml();
  const size_t zeta = out.find("[zeta]\nb = 2\na = 3\n");
  const size_t alpha = out.find("[alpha]\na = 5");
  ASSERT_NE(zeta, std::string::npos) << out;
  ASSERT_NE(alpha, std::string::npos) << out;
  EXPECT_LT(zeta, alpha) << out;
}

TEST_F(RecipeFiles, ToTomlOfAComposedRecipeReloads) {
  write("base.toml", "[model]\ndim = 64\n[run]\ntags = [\"base\"]\n");
  write("sub/child.toml", "base = \"../base.toml\"\n[training]\nlr = 1e-5\n");
  const Recipe r = load("sub/child.toml", {"run.name=from set"});
  const std::string out = r.to_toml();
  EXPECT_NE(out.find(path("sub/child.toml")), std::string::npos) << out;
  EXPECT_NE(out.find(path("base.toml")), std::string::npos) << out;
  const std::string saved = write("resolved.toml", out);
  const Recipe again = Recipe::load(saved, {}, test_schema());
  expect_same_values(r, again, test_schema());
}

}  // namespace
}  // namespace strata
