// Focused checks of the Jinja2 semantics the engine implements. Expected values are what Jinja2
// 3.1 (sandboxed, trim_blocks, lstrip_blocks) produces for the same template.
#include <gtest/gtest.h>

#include "chat_test_util.h"

namespace {

using sluice::test::render_or_error;

TEST(JinjaTruthiness, EmptyValuesAreFalsy) {
  EXPECT_EQ(render_or_error("{{ 'y' if [] else 'n' }}{{ 'y' if {} else 'n' }}{{ 'y' if '' else 'n' }}"
                            "{{ 'y' if 0 else 'n' }}{{ 'y' if 0.0 else 'n' }}{{ 'y' if none else 'n' }}"
                            "{{ 'y' if missing else 'n' }}{{ 'y' if [0] else 'n' }}"),
            "nnnnnnny");
}

TEST(JinjaUndefined, PrintsEmptyAndFailsOnAttributeAccess) {
  EXPECT_EQ(render_or_error("[{{ missing }}]{{ missing is defined }}{{ missing | length }}"), "[]False0");
  EXPECT_EQ(render_or_error("{{ missing.attr }}"), "ERROR: UndefinedError: 'missing' is undefined");
  EXPECT_EQ(render_or_error("{% set d = {} %}[{{ d.x }}]{{ d.x is defined }}"), "[]False");
  EXPECT_EQ(render_or_error("{% set d = {} %}{{ d.x.y }}"), "ERROR: UndefinedError: 'dict object' has no attribute 'x'");
  EXPECT_EQ(render_or_error("{{ none | default('d') }}{{ missing | default('d') }}{{ '' | default('d', true) }}"), "Nonedd");
}

TEST(JinjaLoop, LoopVariables) {
  EXPECT_EQ(render_or_error("{% for x in ['a','b','c'] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}"
                            "{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}"),
            "1032TrueFalse3|2121FalseFalse3|3210FalseTrue3|");
  EXPECT_EQ(render_or_error("{% for a in [1,2] %}{{ loop.previtem }}|{{ loop.nextitem }};{% endfor %}"), "|2;1|;");
  EXPECT_EQ(render_or_error("{% for x in [1,2,3] %}{{ loop.cycle('a','b') }}{% endfor %}"), "aba");
  EXPECT_EQ(render_or_error("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render_or_error("{% for x in range(10) if x is odd %}{% if x > 5 %}{% break %}{% endif %}{{ x }}{{ loop.length }}{% endfor %}"),
            "153555");
  EXPECT_EQ(render_or_error("{% for x in range(4) %}{% if x == 1 %}{% continue %}{% endif %}{{ x }}{% endfor %}"), "023");
}

TEST(JinjaScoping, LoopBodiesDoNotLeakButNamespacesDo) {
  EXPECT_EQ(render_or_error("{% set x = 0 %}{% for i in range(3) %}{{ x }}{% set x = i + 5 %}{{ x }}{% endfor %}{{ x }}"),
            "0506070");
  EXPECT_EQ(render_or_error("{% set ns = namespace(n=0) %}{% for i in range(3) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}"),
            "3");
  EXPECT_EQ(render_or_error("{% macro m(a, b=2) %}{{ a }}{{ b }}{{ g }}{% endmacro %}{% set g = 7 %}{{ m(1, b=3) }}{{ m(4) }}"),
            "137427");
  EXPECT_EQ(render_or_error("{% set a, b = 1, 2 %}{{ b }}{{ a }}{% set s %}x{{ a }}{% endset %}{{ s }}"), "21x1");
}

TEST(JinjaValues, PythonReprAndArithmetic) {
  EXPECT_EQ(render_or_error("{{ (1,2) }}{{ 1.0 }}{{ 1e20 }}{{ 0.00001 }}{{ {'a': none, 'b': true} }}"),
            "(1, 2)1.01e+201e-05{'a': None, 'b': True}");
  EXPECT_EQ(render_or_error("{{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2**3**2 }} {{ 4/2 }}"), "-4 2 3.5 64 2.0");
  EXPECT_EQ(render_or_error("{{ \"it's\" }}{{ [\"it's\", 'a\"b', '\\n'] }}"), "it's[\"it's\", 'a\"b', '\\n']");
  EXPECT_EQ(render_or_error("{{ 'a' ~ 1 ~ none ~ true }}"), "a1NoneTrue");
  EXPECT_EQ(render_or_error("{{ 2.5|round }} {{ 3|round }} {{ 3.14159|round(2) }}"), "2.0 3 3.14");
  EXPECT_EQ(render_or_error("{{ 1 < 'a' }}"), "ERROR: TypeError: '<' not supported between instances of 'int' and 'str'");
}

TEST(JinjaSlicing, PythonSlices) {
  EXPECT_EQ(render_or_error("{{ 'abc'[::-1] }}{{ [1,2,3][1:] }}{{ 'héllo'|length }}{{ [1,2,3,4,5][-2:] }}{{ 'héllo'[1:3] }}"),
            "cba[2, 3]5[4, 5]él");
}

TEST(JinjaToJson, MatchesPythonJsonDumps) {
  EXPECT_EQ(render_or_error("{{ {'a': [1, 2.5, 'é', none, true]} | tojson }}"), "{\"a\": [1, 2.5, \"é\", null, true]}");
  EXPECT_EQ(render_or_error("{{ {'a': [1, {'b': 2}]} | tojson(indent=2) }}"),
            "{\n  \"a\": [\n    1,\n    {\n      \"b\": 2\n    }\n  ]\n}");
  EXPECT_EQ(render_or_error("{{ 'a\"\\n' | tojson }}"), "\"a\\\"\\n\"");
  EXPECT_EQ(render_or_error("{{ x | tojson }}"), "ERROR: TypeError: Object of type Undefined is not JSON serializable");
}

TEST(JinjaWhitespace, TrimAndLstripBlocks) {
  EXPECT_EQ(render_or_error("a\n  {% if true %}\n  b\n  {% endif %}\nc"), "a\n  b\nc");
  EXPECT_EQ(render_or_error("a  {%- if true -%}  b  {%- endif -%}  c"), "abc");
  EXPECT_EQ(render_or_error("{{ 'x' }}\n{{ 'y' }}\n"), "x\ny");
  EXPECT_EQ(render_or_error("a {# c #}\nb\n  {#- d #} e"), "a b e");
  EXPECT_EQ(render_or_error("  {%+ if true %}x{% endif %}"), "  x");
  EXPECT_EQ(render_or_error("{% raw %}{{ x }}{% endraw %}"), "{{ x }}");
}

TEST(JinjaErrors, RaiseExceptionAndSyntaxErrorsBecomeResults) {
  EXPECT_EQ(render_or_error("{{ raise_exception('bad role') }}"), "ERROR: TemplateError: bad role");
  EXPECT_NE(render_or_error("{% if %}").find("ERROR: TemplateSyntaxError"), std::string::npos);
  EXPECT_NE(render_or_error("{% for x in y %}").find("ERROR:"), std::string::npos);
  EXPECT_NE(render_or_error("{{ x | nosuchfilter }}").find("No filter named 'nosuchfilter'"), std::string::npos);
  EXPECT_EQ(render_or_error("{% if false %}{{ x | nosuchfilter }}{% endif %}ok"), "ok");
  EXPECT_EQ(render_or_error("{{ [1].append(2) }}"), "ERROR: SecurityError: access to attribute 'append' of 'list' object is unsafe.");
}

TEST(JinjaLimits, HostileTemplatesStopCleanly) {
  EXPECT_NE(render_or_error("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}").find("RecursionError"), std::string::npos);
  EXPECT_NE(render_or_error("{{ range(1000000) | length }}").find("OverflowError"), std::string::npos);
  std::string deep(200000, '(');
  EXPECT_NE(render_or_error("{{ " + deep + " }}").find("ERROR"), std::string::npos);
}

TEST(JinjaMethods, PythonStringAndDictMethods) {
  EXPECT_EQ(render_or_error("{{ '  a b  '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ 'a,b,c'.split(',', 1) }}|{{ 'a b'.split() }}"),
            "a b|a|['a', 'b,c']|['a', 'b']");
  EXPECT_EQ(render_or_error("{{ 'abc'.startswith(('x', 'a')) }}{{ 'abc'.endswith('bc') }}{{ 'abc'.upper() }}{{ 'a{}c'.format(1) }}"),
            "TrueTrueABCa1c");
  EXPECT_EQ(render_or_error("{% set d = {'a': 1} %}{{ d.get('a') }}{{ d.get('b') }}{{ d.get('b', 2) }}{% for k, v in d.items() %}{{ k }}={{ v }}{% endfor %}"),
            "1None2a=1");
}

TEST(JinjaFilters, CommonFilters) {
  EXPECT_EQ(render_or_error("{{ [3,1,2] | sort | join(',') }}{{ ['a','b'] | map('upper') | list }}{{ [{'n': 1}, {'n': 2}] | selectattr('n', 'gt', 1) | list }}"),
            "1,2,3['A', 'B'][{'n': 2}]");
  EXPECT_EQ(render_or_error("{{ 'hello world' | title }}{{ 'ab' | capitalize }}{{ '  x ' | trim }}{{ 'a\\nb' | indent(2) }}"),
            "Hello WorldAbxa\n  b");
  EXPECT_EQ(render_or_error("{{ {'b': 1, 'a': 2} | dictsort }}{{ [1,1,2] | unique | list }}{{ [1,2,3] | sum }}{{ '3' | int + 1 }}"),
            "[('a', 2), ('b', 1)][1, 2]64");
}

TEST(JinjaFilters, LazyResultsAndMarkupBehaveLikeJinja) {
  // map/select return generators: always truthy, no len(), not JSON-serializable.
  EXPECT_EQ(render_or_error("{{ 'y' if [] | select('odd') else 'n' }}{{ [1] | map('string') | list }}"), "y['1']");
  EXPECT_NE(render_or_error("{{ [1] | map('string') | tojson }}").find("not JSON serializable"), std::string::npos);
  // Markup + str escapes the plain side.
  EXPECT_EQ(render_or_error("{{ '<a>' | safe + '<b>' }}|{{ '<c>' ~ ('<d>' | safe) }}"), "<a>&lt;b&gt;|<c><d>");
}

TEST(JinjaGlobals, StrftimeNowUsesTheInjectedClock) {
  EXPECT_EQ(render_or_error("{{ strftime_now('%Y-%m-%d %H:%M') }}|{{ strftime_now('%d %b %Y') }}"), "2026-11-22 09:30|22 Nov 2026");
}

}  // namespace
