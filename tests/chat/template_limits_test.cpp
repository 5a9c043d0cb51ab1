// Hostile templates and variables: each case here once crashed, hung or ate memory. A template or a
// request may only ever cost a bounded error (RenderBudget, parser limits), and values that contain
// themselves print the way Jinja2 3.1 prints them (expected strings checked against jinja2 3.1.6,
// ImmutableSandboxedEnvironment or, where mutation is needed, SandboxedEnvironment).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>

#include <rapidjson/document.h>

#include "chat/template.h"
#include "chat_test_util.h"
#include "reference.h"
#include "util/file_io.h"

namespace {

using sluice::chat::RenderOptions;
using sluice::chat::Template;
using sluice::test::render_or_error;

std::string repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

// Like render_or_error, with options, and with variables parsed without recursion (the deep
// documents here would overflow rapidjson's recursive parser before reaching the engine).
std::string render_with(const std::string& source, const std::string& variables_json, const RenderOptions& options) {
  auto t = Template::parse(source);
  if (!t) return "ERROR: " + t.message();
  rapidjson::Document vars;
  vars.Parse<rapidjson::kParseIterativeFlag>(variables_json.c_str(), variables_json.size());
  if (vars.HasParseError()) return "ERROR: test variables are not JSON";
  auto r = t->render(vars, sluice::test::golden_clock(), options);
  if (!r) return "ERROR: " + r.message();
  return *r;
}

std::string render_vars(const std::string& source, const std::string& variables_json) {
  return render_with(source, variables_json, RenderOptions{});
}

// For tests that expect one particular part of the budget to run out: the default 2 s of wall time
// can run out first on a loaded machine or in a sanitizer build.
RenderOptions patient() {
  RenderOptions o;
  o.budget.max_wall_time = std::chrono::minutes(5);
  return o;
}

RenderOptions mutable_lists() {
  RenderOptions o;
  o.allow_mutation = true;
  return o;
}

// No clocks in these tests (speed belongs to benchmarks): each names the limit it expects to hit, and the
// runaway forms they replace (loops of 10^13 steps, quadratic key checks) run past the test's timeout.

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

// --- values that contain themselves --------------------------------------------------------------

TEST(TemplateCycles, SelfReferencingNamespacePrintsLikeJinja2) {
  EXPECT_EQ(render_or_error("{% set ns = namespace(a=1) %}{% set ns.a = ns %}{{ ns }}"),
            "<Namespace {'a': <Namespace {...}>}>");
  EXPECT_EQ(render_or_error("{% set ns = namespace(a=1) %}{% set ns.a = ns %}{{ ns.a.a.a }}"),
            "<Namespace {'a': <Namespace {...}>}>");
  EXPECT_EQ(render_or_error("{% set ns = namespace(a=1) %}{% set ns.l = [ns, (ns,)] %}{{ ns }}|{{ ns.l }}"),
            "<Namespace {'a': 1, 'l': [<Namespace {...}>, (<Namespace {...}>,)]}>|"
            "[<Namespace {'a': 1, 'l': [...]}>, (<Namespace {'a': 1, 'l': [...]}>,)]");
  EXPECT_EQ(render_or_error("{% set ns = namespace(a=1) %}{% set ns.b = {'k': ns} %}{{ ns.b }}"),
            "{'k': <Namespace {'a': 1, 'b': {...}}>}");
  // Shared but not cyclic: printed in full each time, as Python does.
  EXPECT_EQ(render_or_error("{% set ns = namespace() %}{% set ns.l = [1] %}{% set ns.l = [ns.l, ns.l] %}{{ ns.l }}"),
            "[[1], [1]]");
}

TEST(TemplateCycles, SelfContainingListsAndDictsPrintLikePython) {
  EXPECT_EQ(render_with("{% set l = [1] %}{% set _ = l.append(l) %}{{ l }}", "{}", mutable_lists()), "[1, [...]]");
  EXPECT_EQ(render_with("{% set l = [1] %}{% set _ = l.append((l,)) %}{{ l }}", "{}", mutable_lists()), "[1, ([...],)]");
  EXPECT_EQ(render_with("{% set d = {} %}{% set _ = d.update({'x': d}) %}{{ d }}", "{}", mutable_lists()), "{'x': {...}}");
}

TEST(TemplateCycles, TojsonOfACycleIsCircularReferenceError) {
  EXPECT_EQ(render_with("{% set l = [1] %}{% set _ = l.append(l) %}{{ l|tojson }}", "{}", mutable_lists()),
            "ERROR: ValueError: Circular reference detected");
  EXPECT_EQ(render_with("{% set d = {} %}{% set _ = d.update({'x': [d]}) %}{{ d|tojson }}", "{}", mutable_lists()),
            "ERROR: ValueError: Circular reference detected");
  // A namespace is not JSON at all (Jinja2: TypeError), cyclic or not.
  EXPECT_EQ(render_or_error("{% set ns = namespace(a=1) %}{% set ns.a = ns %}{{ ns|tojson }}"),
            "ERROR: TypeError: Object of type Namespace is not JSON serializable");
  // The same list twice is not a cycle.
  EXPECT_EQ(render_or_error("{% set ns = namespace() %}{% set ns.l = [1] %}{% set ns.l = [ns.l, ns.l] %}{{ ns.l|tojson }}"),
            "[[1], [1]]");
}

TEST(TemplateCycles, ComparingSelfContainingValuesIsARecursionError) {
  const std::string out = render_with(
      "{% set a = [1] %}{% set b = [1] %}{% set _ = a.append(a) %}{% set _ = b.append(b) %}{{ a == b }}", "{}",
      mutable_lists());
  EXPECT_TRUE(starts_with(out, "ERROR: RecursionError")) << out;
}

// --- nesting: the parser's and the interpreter's native recursion ------------------------------

// Each of these parsed with one native frame (or more) per level and no limit: SIGSEGV.
TEST(TemplateNesting, DeeplyNestedTemplatesAreSyntaxErrorsWithALine) {
  const int n = 100000;
  const int tags = 30000;  // a statement level took over 1 KiB of stack
  const std::string cases[] = {
      repeat("{% if true %}", tags) + "x" + repeat("{% endif %}", tags),
      repeat("{% for i in [1] %}", tags) + "x" + repeat("{% endfor %}", tags),
      "{{ " + repeat("not ", n) + "1 }}",
      "{{ " + repeat("(", n) + "1" + repeat(")", n) + " }}",
      "{{ " + repeat("[", n) + repeat("]", n) + " }}",
      "{{ " + repeat("-", n) + "1 }}",
      "{{ 1" + repeat("|abs", n) + " }}",
      "{{ 1" + repeat(" + 1", n) + " }}",
      "{{ x" + repeat(".a", n) + " }}",
      "{{ x" + repeat("[0]", n) + " }}",
      "{{ f" + repeat("()", n) + " }}",
      "{{ 1" + repeat(" if x else 1", n) + " }}",
      "{{ 1" + repeat(" is number", n) + " }}",
      "{% set " + repeat("(", n) + "a" + repeat(")", n) + " = 1 %}",
  };
  for (const auto& source : cases) {
    auto t = Template::parse(source);
    ASSERT_FALSE(t.ok()) << source.substr(0, 40);
    EXPECT_NE(t.message().find("TemplateSyntaxError"), std::string::npos) << t.message();
    EXPECT_NE(t.message().find("(line 1)"), std::string::npos) << t.message();
  }
}

TEST(TemplateNesting, RealisticNestingStillRenders) {
  EXPECT_EQ(render_or_error(repeat("{% if true %}", 60) + "x" + repeat("{% endif %}", 60)), "x");
  EXPECT_EQ(render_or_error("{{ " + repeat("(", 60) + "1" + repeat(")", 60) + " }}"), "1");
  EXPECT_EQ(render_or_error("{{ 'a'" + repeat(" ~ 'a'", 299) + " }}"), repeat("a", 300));
  EXPECT_EQ(render_or_error("{{ 1" + repeat("|abs", 300) + " }}"), "1");
}

TEST(TemplateNesting, RecursiveMacrosStopWithRecursionErrorNotACrash) {
  const std::string countdown =
      "{% macro m(n) %}{% if n > 0 %}{{ m(n - 1) }}{% else %}{{ n }}{% endif %}{% endmacro %}{{ m(N) }}";
  EXPECT_EQ(render_vars(countdown, R"({"N": 150})"), "0");  // Jinja2 3.1 manages 150, as we must
  const std::string out = render_vars(countdown, R"({"N": 1000000})");
  EXPECT_TRUE(starts_with(out, "ERROR: RecursionError")) << out;
}

// A value nested a million deep used to be freed one native frame per level (SIGSEGV at the end
// of the render); printing or comparing a deep value must fail cleanly too.
TEST(TemplateNesting, VeryDeepValuesAreFreedAndPrintedWithoutOverflow) {
  const RenderOptions o = patient();
  const std::string fifty_deep = repeat("[", 50) + "ns.x" + repeat("]", 50);
  EXPECT_EQ(render_with("{% set ns = namespace(x=[]) %}{% for i in range(20) %}{% for j in range(1000) %}"
                        "{% set ns.x = " + fifty_deep + " %}{% endfor %}{% endfor %}built",
                        "{}", o),
            "built");
  const std::string build =  // deeper than repr/tojson/== go (500 levels)
      "{% set ns = namespace(x=[]) %}{% for i in range(2000) %}{% set ns.x = [ns.x] %}{% endfor %}";
  const std::string printed = render_with(build + "{{ ns.x }}", "{}", o);
  EXPECT_TRUE(starts_with(printed, "ERROR: RecursionError")) << printed;
  const std::string json = render_with(build + "{{ ns.x|tojson }}", "{}", o);
  EXPECT_TRUE(starts_with(json, "ERROR: RecursionError")) << json;
  // Two separately built chains (the same object twice would compare equal by identity, as in Python).
  const std::string two_chains =
      "{% set ns = namespace(x=[], y=[]) %}{% for i in range(2000) %}"
      "{% set ns.x = [ns.x] %}{% set ns.y = [ns.y] %}{% endfor %}";
  const std::string compared = render_with(two_chains + "{{ ns.x == ns.y }}", "{}", o);
  EXPECT_TRUE(starts_with(compared, "ERROR: RecursionError")) << compared;
  // Nested through dict keys: the lookup of each key compares one level deeper.
  const std::string through_keys =
      "{% set ns = namespace(a={}, b={}) %}{% for i in range(3000) %}"
      "{% set ns.a = {(ns.a,): 1} %}{% set ns.b = {(ns.b,): 1} %}{% endfor %}{{ ns.a == ns.b }}";
  const std::string keyed = render_with(through_keys, "{}", o);
  EXPECT_TRUE(starts_with(keyed, "ERROR: RecursionError")) << keyed;
}

// --- arithmetic and sizes -------------------------------------------------------------------------

TEST(TemplateArithmetic, PowerUsesSquaringAndReportsOverflow) {
  EXPECT_EQ(render_or_error("{{ 1 ** 9999999999999 }}|{{ (-1) ** 9999999999999 }}|{{ 0 ** 9999999999999 }}"), "1|-1|0");
  EXPECT_EQ(render_or_error("{{ 2 ** 62 }}|{{ (-2) ** 63 }}|{{ 7 ** 0 }}|{{ 2 ** -1 }}"),
            "4611686018427387904|-9223372036854775808|1|0.5");
  // Python's ints are unbounded (3 ** 40 = 12157665459056928801); ours are 64-bit and say so.
  EXPECT_EQ(render_or_error("{{ 3 ** 40 }}"), "ERROR: OverflowError: 3 ** 40 does not fit in a 64-bit integer");
  EXPECT_TRUE(starts_with(render_or_error("{{ 2 ** 9999999999999 }}"), "ERROR: OverflowError"));
}

TEST(TemplateArithmetic, RepetitionSizeIsOverflowChecked) {
  EXPECT_EQ(render_or_error("{{ 'ab' * 0 }}|{{ [1] * -1 }}|{{ 'ab' * 3 }}|{{ [1, 2] * 2 }}"), "|[]|ababab|[1, 2, 1, 2]");
  // 4 * 2^62 wraps to 0 in 64 bits: the old size check passed and the loop ran 2^62 times.
  EXPECT_TRUE(starts_with(render_or_error("{{ 'abcd' * 4611686018427387904 }}"), "ERROR: OverflowError")) ;
  EXPECT_TRUE(starts_with(render_or_error("{{ [1, 2, 3, 4] * 4611686018427387904 }}"), "ERROR:"));
  EXPECT_TRUE(starts_with(render_or_error("{{ 'abcd' * 9999999999 }}"), "ERROR: TemplateRuntimeError"));
  // Copies of a list copy its strings: a list of one big string repeated is big.
  EXPECT_TRUE(starts_with(render_or_error("{% set s = 'x' * 1000000 %}{{ ([s] * 100)|length }}"), "ERROR:"));
}

TEST(TemplateArithmetic, StepsNearTheInt64LimitDoNotWrap) {
  // Jinja2: [5], [2], [-5]. The next index used to overflow (undefined behaviour, then a wrap).
  EXPECT_EQ(render_or_error("{{ range(5, 10, 9223372036854775807)|list }}|{{ [1, 2, 3][1::9223372036854775807] }}|"
                            "{{ range(-5, -10, -9223372036854775807)|list }}"),
            "[5]|[2]|[-5]");
}

TEST(TemplateArithmetic, HugePaddingWidthsFailFast) {
  EXPECT_EQ(render_or_error("{{ 'ab'|center(7) }}|{{ 'x'.ljust(3, '-') }}|{{ '-5'.zfill(4) }}|{{ 'x'.rjust(3) }}"),
            "   ab  |x--|-005|  x");
  EXPECT_EQ(render_or_error("{{ '%05d'|format(3) }}|{{ '{:>5}'.format(1) }}|{{ 'a\nb'|indent(2) }}"), "00003|    1|a\n  b");
  const std::string cases[] = {
      "{{ 'x'|center(99999999999999999) }}",
      "{{ 'x'.ljust(4611686018427387904) }}",
      "{{ 'x'.rjust(9999999999) }}",
      "{{ 'x'.zfill(9999999999) }}",
      "{{ 'x'.center(9999999999, '*') }}",
      "{{ '{:>99999999999}'.format(1) }}",
      "{{ '{:99999999999999999999999}'.format(1) }}",
      "{{ '%99999999999s'|format(1) }}",
      "{{ '%99999999999f'|format(1.5) }}",
      "{{ 'a\nb\nc'|indent(9999999999) }}",
      "{{ [1]|tojson(indent=9999999999) }}",
      "{{ [1]|batch(9999999999, 0)|list }}",
      "{{ [1]|slice(9999999999)|list }}",
  };
  for (const auto& source : cases) {
    const std::string out = render_or_error(source);
    EXPECT_TRUE(starts_with(out, "ERROR:")) << source << " -> " << out.substr(0, 80);
  }
  // A moderate indent times many lines is also bounded.
  EXPECT_TRUE(starts_with(render_or_error("{{ ('x\n' * 100000)|indent(1000) }}"), "ERROR:"));
}

TEST(TemplateArithmetic, StringsCannotGrowPastTheSizeBudget) {
  const std::string doubling =
      "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}";
  EXPECT_TRUE(starts_with(render_or_error(doubling), "ERROR: TemplateRuntimeError")) << render_or_error(doubling);
  const std::string quoting = "{% set ns = namespace(s='\"') %}{% for i in range(64) %}{% set ns.s = ns.s|tojson %}{% endfor %}";
  EXPECT_TRUE(starts_with(render_or_error(quoting), "ERROR: TemplateRuntimeError")) << render_or_error(quoting).substr(0, 80);
  const std::string replacing = "{% set s = 'a' * 10000 %}{{ s.replace('a', s)|length }}";
  EXPECT_TRUE(starts_with(render_or_error(replacing), "ERROR: TemplateRuntimeError"));
  // A value sharing one list 2^64 times over: its repr and JSON would be exponentially long.
  const std::string shared =
      "{% set ns = namespace(x=[1], y=[1]) %}{% for i in range(64) %}{% set ns.x = [ns.x, ns.x] %}"
      "{% set ns.y = [ns.y, ns.y] %}{% endfor %}";
  for (const std::string tail : {"{{ ns.x }}", "{{ ns.x|tojson }}", "{{ ns.x == ns.y }}"}) {
    const std::string out = render_or_error(shared + tail);
    EXPECT_TRUE(starts_with(out, "ERROR: TemplateRuntimeError")) << tail << " -> " << out.substr(0, 80);
  }
}

// --- the budget ----------------------------------------------------------------------------------

TEST(TemplateBudget, RunawayLoopsStopAtTheStepBudget) {
  const std::string loops = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}";
  const std::string out = render_or_error(loops);  // steps or wall time, whichever comes first
  EXPECT_TRUE(starts_with(out, "ERROR: TemplateRuntimeError: the template exceeded its")) << out;
  RenderOptions o = patient();
  o.budget.max_steps = 100000;
  EXPECT_NE(render_with(loops, "{}", o).find("step budget (100000 steps)"), std::string::npos);
}

TEST(TemplateBudget, OutputStopsAtTheOutputBudget) {
  const std::string out = render_with("{% for i in range(1000) %}{{ 'x' * 10000 }}{% endfor %}", "{}", patient());  // 10 MB
  EXPECT_NE(out.find("exceeds the size budget"), std::string::npos) << out.substr(0, 80);
}

TEST(TemplateBudget, HeldStringsStopAtTheMemoryBudget) {
  // Every level of the recursion holds its own copy of an 8 MB argument: ~1 GB by level 120.
  const std::string recursion =
      "{% macro m(s, n) %}{% if n > 0 %}{{ m(s, n - 1) }}{% endif %}{% endmacro %}{{ m('x' * 8000000, 120) }}";
  const std::string out = render_with(recursion, "{}", patient());
  EXPECT_NE(out.find("memory budget"), std::string::npos) << out.substr(0, 80);
  // Building a string by accumulation holds only the latest copy: long conversations do this.
  EXPECT_EQ(render_with("{% set ns = namespace(s='') %}{% for i in range(200) %}{% set ns.s = ns.s ~ ('x' * 20000) %}"
                        "{% endfor %}{{ ns.s|length }}",
                        "{}", patient()),
            "4000000");
}

TEST(TemplateBudget, WallTimeStopsARenderThatStaysWithinItsSteps) {
  RenderOptions o;
  o.budget.max_steps = UINT64_MAX;
  o.budget.max_wall_time = std::chrono::milliseconds(100);
  const std::string out = render_with(
      "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "{}", o);
  EXPECT_NE(out.find("time budget (100 ms)"), std::string::npos) << out;
}

// The defaults must leave real templates alone: every template in ../shared renders a long
// conversation with tools (0.8 MiB of content) without touching any part of the budget. Wall time
// aside: it depends on the machine (sanitizer builds are ~20x slower); CPU time is checked instead.
TEST(TemplateBudget, DefaultsLeaveRealTemplatesWithLongConversationsAlone) {
  SLUICE_REQUIRE_REFERENCE("chat_templates");
  const std::string content = repeat("lorem ipsum dolor sit amet, ", 146);  // ~4 KiB
  std::string messages = "[";
  for (int i = 0; i < 200; ++i)
    messages += std::string(i ? "," : "") + R"({"role": ")" + (i % 2 ? "assistant" : "user") + R"(", "content": ")" +
                content + std::to_string(i) + R"("})";
  messages += "]";
  std::string tools = "[";
  for (int i = 0; i < 20; ++i)
    tools += std::string(i ? "," : "") + R"({"type": "function", "function": {"name": "tool)" + std::to_string(i) +
             R"(", "description": "does things", "parameters": {"type": "object", "properties": {"a": {"type": "object",
             "properties": {"b": {"type": "array", "items": {"type": "string"}}}}}, "required": ["a"]}}})";
  tools += "]";
  const std::string vars = R"({"messages": )" + messages + R"(, "tools": )" + tools +
                           R"(, "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>"})";
  int rendered = 0;
  for (const auto& entry : std::filesystem::directory_iterator(sluice::test::reference_path("chat_templates"))) {
    auto source = sluice::read_text_file(entry.path());
    ASSERT_TRUE(source.ok()) << source.message();
    const std::string out = render_with(*source, vars, patient());
    // A template may refuse the conversation itself (raise_exception), never for want of budget.
    for (const char* limit : {"budget", "RecursionError", "nested deeper", "nests too deeply"})
      EXPECT_EQ(out.find(limit), std::string::npos) << entry.path().filename() << ": " << out.substr(0, 200);
    if (!starts_with(out, "ERROR:")) ++rendered;
  }
  EXPECT_GT(rendered, 40);
}

TEST(TemplateBudget, CallersMayTightenEachPart) {
  RenderOptions o;
  o.budget.max_output_bytes = 10;
  EXPECT_EQ(render_with("{{ 'x' * 10 }}", "{}", o), "xxxxxxxxxx");
  EXPECT_TRUE(starts_with(render_with("{{ 'x' * 11 }}", "{}", o), "ERROR:"));
  RenderOptions held;
  held.budget.max_held_bytes = 100000;
  EXPECT_NE(render_with("{% set a = 'x' * 60000 %}{% set b = a ~ 'y' %}", "{}", held).find("memory budget"),
            std::string::npos);
  RenderOptions steps;
  steps.budget.max_steps = 1000;
  EXPECT_NE(render_with("{% for i in range(2000) %}{% endfor %}", "{}", steps).find("step budget"), std::string::npos);
  RenderOptions depth;
  depth.budget.max_depth = 50;
  const std::string countdown =
      "{% macro m(n) %}{% if n > 0 %}{{ m(n - 1) }}{% else %}{{ n }}{% endif %}{% endmacro %}{{ m(N) }}";
  EXPECT_EQ(render_with(countdown, R"({"N": 2})", depth), "0");
  EXPECT_TRUE(starts_with(render_with(countdown, R"({"N": 20})", depth), "ERROR: RecursionError"));
}

TEST(TemplateBudget, QuadraticBuiltinsAreCharged) {
  // dict() over 100 000 pairs scans the keys once per pair: 5*10^9 comparisons without a charge.
  std::string pairs = "[";
  for (int i = 0; i < 100000; ++i) pairs += (i ? "," : "") + std::string("[\"k") + std::to_string(i) + "\",1]";
  pairs += "]";
  const std::string out = render_with("{{ dict(pairs)|length }}", R"({"pairs": )" + pairs + "}", patient());
  EXPECT_NE(out.find("step budget"), std::string::npos) << out.substr(0, 80);
  EXPECT_TRUE(starts_with(render_vars("{{ pairs|unique|list|length }}", R"({"pairs": )" + pairs + "}"), "ERROR:"));
}

// --- request JSON to template values --------------------------------------------------------------

TEST(TemplateVariables, DeeplyNestedJsonIsAnErrorNotAStackOverflow) {
  const int n = 24000;  // ~50 KB: the request body that killed the server through `tools`
  const std::string vars = R"({"tools": )" + repeat("[", n) + repeat("]", n) + "}";
  const std::string out = render_vars("{{ tools|length }}", vars);
  EXPECT_TRUE(starts_with(out, "ERROR: ValueError: template variables nested deeper than")) << out;
  const std::string deep = R"({"tools": )" + repeat("[", 1000000) + repeat("]", 1000000) + "}";
  EXPECT_TRUE(starts_with(render_vars("{{ tools|length }}", deep), "ERROR: ValueError"));
  // Realistic depth converts and prints back unchanged.
  const std::string nested = repeat("[", 100) + repeat("]", 100);
  EXPECT_EQ(render_vars("{{ tools|tojson }}", R"({"tools": )" + nested + "}"), nested);
}

TEST(TemplateVariables, DuplicateKeysKeepFirstPositionAndLastValueWithAHashIndex) {
  EXPECT_EQ(render_vars("{{ d }}", R"({"d": {"a": 1, "b": 2, "a": 3}})"), "{'a': 3, 'b': 2}");
  std::string many = "{";
  for (int i = 0; i < 20; ++i) many += "\"k" + std::to_string(i) + "\": " + std::to_string(i) + ", ";
  many += R"("k3": "last"})";
  EXPECT_EQ(render_vars("{{ d|length }} {{ d.k3 }} {{ (d|list)[3] }} {{ (d|list)[19] }}", R"({"d": )" + many + "}"),
            "20 last k3 k19");
  // 100 000 keys: ~5*10^9 key comparisons before (80 000 took 18 s); now one hash lookup each.
  std::string object = "{";
  for (int i = 0; i < 100000; ++i) object += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":" + std::to_string(i);
  object += R"(,"k0":"again"})";
  EXPECT_EQ(render_vars("{{ d|length }} {{ d.k0 }}", R"({"d": )" + object + "}"), "100000 again");
}

}  // namespace
