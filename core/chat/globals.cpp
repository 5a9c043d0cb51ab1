// Global functions of the environment transformers builds: Jinja's range/dict/namespace/cycler/
// joiner plus transformers' raise_exception and strftime_now.
#include <ctime>

#include "chat/builtins.h"
#include "chat/interpreter.h"
#include "chat/meter.h"

namespace sluice::chat {

std::vector<std::pair<std::string, Value>> make_globals(Interpreter& in) {
  std::vector<std::pair<std::string, Value>> g;
  g.emplace_back("range", make_callable("range", [](Interpreter& in, CallArgs& args) {
    if (!args.keyword.empty()) fail("TypeError: range() takes no keyword arguments");
    const auto& p = args.positional;
    if (p.empty() || p.size() > 3) fail("TypeError: range expected 1 to 3 arguments");
    for (const auto& v : p)
      if (!(v.is_int() || v.is_bool())) fail("TypeError: '" + type_name(v) + "' object cannot be interpreted as an integer");
    std::int64_t start = p.size() > 1 ? p[0].to_int() : 0;
    std::int64_t stop = p.size() > 1 ? p[1].to_int() : p[0].to_int();
    std::int64_t step = p.size() > 2 ? p[2].to_int() : 1;
    if (step == 0) fail("ValueError: range() arg 3 must not be zero");
    std::vector<Value> out;
    for (std::int64_t i = start; step > 0 ? i < stop : i > stop;) {
      // The sandbox's MAX_RANGE.
      if (out.size() >= 100000) fail("OverflowError: Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
      out.emplace_back(i);
      if (__builtin_add_overflow(i, step, &i)) break;  // the next value is past any int64 stop
    }
    charge_steps(out.size());
    return Value::list(std::move(out));
  }));
  auto dict_from = [](CallArgs& args, DictObject::Kind kind) {
    auto d = std::make_shared<DictObject>();
    d->kind = kind;
    // Each set scans the keys so far: charged as steps, so that a huge list of pairs cannot spend
    // quadratic time inside this one call.
    auto put = [&d](const Value& k, const Value& v) {
      charge_steps(1 + d->items.size());
      d->set(k, v);
    };
    for (const auto& p : args.positional) {
      if (p.is_dict()) {
        for (const auto& [k, v] : p.as_dict()->items) put(k, v);
      } else {
        for (const auto& pair : iterate(p)) {
          auto kv = iterate(pair);
          if (kv.size() != 2) fail("ValueError: dictionary update sequence element has wrong length");
          put(kv[0], kv[1]);
        }
      }
    }
    for (const auto& [k, v] : args.keyword) put(Value(k), v);
    return Value(d);
  };
  g.emplace_back("dict", make_callable("dict", [dict_from](Interpreter&, CallArgs& args) {
    return dict_from(args, DictObject::Kind::Dict);
  }));
  g.emplace_back("namespace", make_callable("namespace", [dict_from](Interpreter&, CallArgs& args) {
    return dict_from(args, DictObject::Kind::Namespace);
  }));
  g.emplace_back("raise_exception", make_callable("raise_exception", [](Interpreter&, CallArgs& args) -> Value {
    std::string msg = args.positional.empty() ? std::string() : to_str(args.positional[0]);
    fail("TemplateError: " + msg);
  }));
  g.emplace_back("strftime_now", make_callable("strftime_now", [](Interpreter& in, CallArgs& args) {
    ArgBinder a("strftime_now", args, {"format"});
    const Value& f = a.get(0);
    if (!f.is_string()) fail("TypeError: strftime() argument 1 must be str");
    std::time_t t = std::chrono::system_clock::to_time_t(in.now());
    std::tm tm{};
    localtime_r(&t, &tm);  // datetime.now() is local time
    std::string fmt = f.as_string();
    if (fmt.empty()) return Value("");
    std::string buf(256 + fmt.size() * 8, '\0');
    std::size_t n = std::strftime(buf.data(), buf.size(), fmt.c_str(), &tm);
    buf.resize(n);
    return Value(buf);
  }));
  g.emplace_back("cycler", make_callable("cycler", [](Interpreter&, CallArgs& args) {
    auto items = std::make_shared<std::vector<Value>>(args.positional);
    if (items->empty()) fail("RuntimeError: at least one item has to be provided");
    auto pos = std::make_shared<std::size_t>(0);
    auto obj = std::make_shared<DictObject>();
    obj->kind = DictObject::Kind::Object;
    obj->set(Value("items"), Value::list(*items));
    obj->set(Value("next"), make_callable("next", [items, pos, o = std::weak_ptr<DictObject>(obj)](Interpreter&, CallArgs&) {
      Value v = (*items)[*pos];
      *pos = (*pos + 1) % items->size();
      if (auto self = o.lock()) self->set(Value("current"), (*items)[*pos]);
      return v;
    }));
    obj->set(Value("reset"), make_callable("reset", [items, pos, o = std::weak_ptr<DictObject>(obj)](Interpreter&, CallArgs&) {
      *pos = 0;
      if (auto self = o.lock()) self->set(Value("current"), (*items)[0]);
      return Value::none();
    }));
    obj->set(Value("current"), (*items)[0]);
    return Value(obj);
  }));
  g.emplace_back("joiner", make_callable("joiner", [](Interpreter&, CallArgs& args) {
    ArgBinder a("joiner", args, {"sep"});
    std::string sep = to_str(a.get_or(0, Value(", ")));
    auto used = std::make_shared<bool>(false);
    return make_callable("joiner", [sep, used](Interpreter&, CallArgs&) {
      if (!*used) {
        *used = true;
        return Value("");
      }
      return Value(sep);
    });
  }));
  (void)in;
  return g;
}

}  // namespace sluice::chat
