// The restricted unpickler (see pickle.h). Values live in an arena of nodes referred to by index, so
// memo references and in-place updates (SETITEMS on a memoized dict) need no ownership games, and
// nothing is ever traversed recursively (a self-referencing pickle cannot blow the stack).
#include "pickle.h"

#include <bit>
#include <cstring>
#include <map>
#include <unordered_map>

namespace io::pickle {
namespace {

enum class Global {
  kOrderedDict, kRebuildTensorV2, kRebuildParameter, kRebuildParameterWithState, kTorchSize, kStorageType
};

struct Node {
  enum Kind : uint8_t { kNone, kBool, kInt, kFloat, kStr, kTuple, kList, kDict, kGlobal, kStorage, kTensor };
  explicit Node(Kind k) : kind(k) {}
  Kind kind;
  int64_t i = 0;           // bool / int value; Global; storage or tensor index
  DType dtype{};           // a storage type global's dtype
  std::string s;           // str
  std::vector<size_t> items;  // tuple / list elements; dict: key, value, key, value, ...
};

const char* kind_name(Node::Kind k) {
  static const char* names[] = {"None", "bool", "int", "float", "str", "tuple", "list", "dict", "global", "storage", "tensor"};
  return names[k];
}

class Machine {
 public:
  Machine(const uint8_t* data, size_t size, std::string origin) : p_(data), size_(size), origin_(std::move(origin)) {}

  // Runs to STOP; returns the root node.
  size_t run();
  size_t consumed() const { return pos_; }
  const Node& node(size_t i) const { return nodes_[i]; }
  [[noreturn]] void fail(const std::string& what) const {
    throw Error(origin_ + ": " + what + " at byte " + std::to_string(op_pos_));
  }
  std::vector<Storage> storages;
  std::vector<TensorRef> tensors;

 private:
  size_t push_new(Node n) {
    nodes_.push_back(std::move(n));
    stack_.push_back(nodes_.size() - 1);
    return nodes_.size() - 1;
  }
  size_t pop() {
    if (stack_.size() <= (marks_.empty() ? 0 : marks_.back())) fail("pickle stack underflow");
    const size_t v = stack_.back();
    stack_.pop_back();
    return v;
  }
  size_t top() {
    if (stack_.size() <= (marks_.empty() ? 0 : marks_.back())) fail("pickle stack underflow");
    return stack_.back();
  }
  std::vector<size_t> pop_mark() {
    if (marks_.empty()) fail("pickle MARK missing");
    std::vector<size_t> items(stack_.begin() + static_cast<std::ptrdiff_t>(marks_.back()), stack_.end());
    stack_.resize(marks_.back());
    marks_.pop_back();
    return items;
  }
  const uint8_t* take(size_t n) {
    if (n > size_ - pos_) fail("pickle truncated");
    const uint8_t* q = p_ + pos_;
    pos_ += n;
    return q;
  }
  uint64_t le(size_t n) {
    const uint8_t* q = take(n);
    uint64_t v = 0;
    for (size_t k = n; k-- > 0;) v = (v << 8) | q[k];
    return v;
  }
  std::string line() {
    const void* nl = std::memchr(p_ + pos_, '\n', std::min<size_t>(size_ - pos_, 256));
    if (nl == nullptr) fail("pickle GLOBAL name not terminated");
    const size_t n = static_cast<size_t>(static_cast<const uint8_t*>(nl) - (p_ + pos_));
    std::string s(reinterpret_cast<const char*>(take(n)), n);
    take(1);
    return s;
  }
  const Node& of(size_t i, Node::Kind k, const char* what) {
    if (nodes_[i].kind != k) fail(std::string(what) + " must be a " + kind_name(k) + ", got " + kind_name(nodes_[i].kind));
    return nodes_[i];
  }
  int64_t int_of(size_t i, const char* what) { return of(i, Node::kInt, what).i; }
  void global(const std::string& module, const std::string& name);
  void persistent_id();
  void reduce();
  std::vector<int64_t> int_tuple(size_t i, const char* what);

  const uint8_t* p_;
  size_t size_, pos_ = 0, op_pos_ = 0;
  std::string origin_;
  std::vector<Node> nodes_;
  std::vector<size_t> stack_, marks_;
  std::unordered_map<uint64_t, size_t> memo_;
  std::map<std::string, size_t> storage_of_key_;
};

void Machine::global(const std::string& module, const std::string& name) {
  static const std::map<std::string, DType> storage_types = {
      {"FloatStorage", DType::F32}, {"DoubleStorage", DType::F64}, {"HalfStorage", DType::F16},
      {"BFloat16Storage", DType::BF16}, {"LongStorage", DType::I64}, {"IntStorage", DType::I32},
      {"ShortStorage", DType::I16}, {"CharStorage", DType::I8}, {"ByteStorage", DType::U8}, {"BoolStorage", DType::BOOL}};
  Node n(Node::kGlobal);
  if (module == "collections" && name == "OrderedDict") {
    n.i = static_cast<int64_t>(Global::kOrderedDict);
  } else if (module == "torch._utils" && name == "_rebuild_tensor_v2") {
    n.i = static_cast<int64_t>(Global::kRebuildTensorV2);
  } else if (module == "torch._utils" && name == "_rebuild_parameter") {
    n.i = static_cast<int64_t>(Global::kRebuildParameter);
  } else if (module == "torch._utils" && name == "_rebuild_parameter_with_state") {
    n.i = static_cast<int64_t>(Global::kRebuildParameterWithState);
  } else if (module == "torch" && name == "Size") {
    n.i = static_cast<int64_t>(Global::kTorchSize);
  } else if (auto it = storage_types.find(name); module == "torch" && it != storage_types.end()) {
    n.i = static_cast<int64_t>(Global::kStorageType);
    n.dtype = it->second;
  } else {
    std::string shown = module + "." + name;
    for (char& c : shown) {
      if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';
    }
    fail("forbidden global '" + shown + "' (only tensor state dicts are loaded)");
  }
  push_new(std::move(n));
}

void Machine::persistent_id() {
  const size_t pid = pop();
  const Node& t = of(pid, Node::kTuple, "a persistent id");
  if (t.items.size() != 5 && t.items.size() != 6) fail("a persistent id must be ('storage', type, key, location, numel)");
  const std::vector<size_t> f = t.items;
  if (nodes_[f[0]].kind != Node::kStr || nodes_[f[0]].s != "storage") fail("persistent id is not a 'storage' reference");
  const Node& type = of(f[1], Node::kGlobal, "a storage type");
  if (type.i != static_cast<int64_t>(Global::kStorageType)) fail("persistent id names a non-storage type");
  const std::string key = of(f[2], Node::kStr, "a storage key").s;
  of(f[3], Node::kStr, "a storage location");
  const int64_t numel = int_of(f[4], "a storage size");
  if (f.size() == 6 && nodes_[f[5]].kind != Node::kNone) fail("storage views (legacy view_metadata) are not supported");
  if (key.empty() || key.size() > 64 ||
      key.find_first_not_of("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_") != std::string::npos) {
    fail("storage key is not a plain name");
  }
  if (numel < 0 || numel > (int64_t{1} << 48)) fail("storage '" + key + "' has an invalid size " + std::to_string(numel));
  Node n(Node::kStorage);
  if (auto it = storage_of_key_.find(key); it != storage_of_key_.end()) {
    const Storage& s = storages[it->second];
    if (s.dtype != type.dtype || s.numel != numel) fail("storage '" + key + "' is referenced with two types or sizes");
    n.i = static_cast<int64_t>(it->second);
  } else {
    storages.push_back({key, type.dtype, numel});
    n.i = static_cast<int64_t>(storages.size() - 1);
    storage_of_key_.emplace(key, storages.size() - 1);
  }
  push_new(std::move(n));
}

std::vector<int64_t> Machine::int_tuple(size_t i, const char* what) {
  std::vector<int64_t> out;
  for (size_t e : of(i, Node::kTuple, what).items) {
    const int64_t v = int_of(e, what);
    if (v < 0 || v > (int64_t{1} << 48)) fail(std::string(what) + " entries must be in [0, 2^48]");
    out.push_back(v);
  }
  return out;
}

void Machine::reduce() {
  const size_t args_i = pop(), fn_i = pop();
  const Node& fn = of(fn_i, Node::kGlobal, "a REDUCE callable");
  const std::vector<size_t> args = of(args_i, Node::kTuple, "REDUCE arguments").items;
  auto empty_dict = [&](size_t i, const char* what) {
    if (!of(i, Node::kDict, what).items.empty()) fail(std::string(what) + " must be empty");
  };
  switch (static_cast<Global>(fn.i)) {
    case Global::kOrderedDict:
      if (!args.empty()) fail("OrderedDict(...) with arguments is not supported");
      push_new(Node(Node::kDict));
      return;
    case Global::kTorchSize:
      if (args.size() != 1) fail("torch.Size takes one tuple");
      int_tuple(args[0], "torch.Size");
      stack_.push_back(args[0]);
      return;
    case Global::kRebuildTensorV2: {
      if (args.size() != 6 && args.size() != 7) fail("_rebuild_tensor_v2 takes 6 or 7 arguments");
      TensorRef t;
      t.storage = static_cast<size_t>(of(args[0], Node::kStorage, "a tensor's storage").i);
      t.offset = int_of(args[1], "a storage offset");
      if (t.offset < 0 || t.offset > (int64_t{1} << 48)) fail("invalid storage offset");
      t.size = int_tuple(args[2], "a tensor size");
      t.stride = int_tuple(args[3], "a tensor stride");
      if (t.size.size() != t.stride.size()) fail("tensor size and stride differ in length");
      if (t.size.size() > 64) fail("tensor has too many dimensions");
      of(args[4], Node::kBool, "requires_grad");
      empty_dict(args[5], "backward hooks");
      if (args.size() == 7) empty_dict(args[6], "tensor metadata");
      tensors.push_back(std::move(t));
      Node n(Node::kTensor);
      n.i = static_cast<int64_t>(tensors.size() - 1);
      push_new(std::move(n));
      return;
    }
    case Global::kRebuildParameter:
    case Global::kRebuildParameterWithState: {
      const size_t want = static_cast<Global>(fn.i) == Global::kRebuildParameter ? 3 : 4;
      if (args.size() != want) fail("_rebuild_parameter takes " + std::to_string(want) + " arguments");
      of(args[0], Node::kTensor, "a parameter's data");
      of(args[1], Node::kBool, "requires_grad");
      empty_dict(args[2], "backward hooks");
      if (want == 4 && nodes_[args[3]].kind != Node::kNone) empty_dict(args[3], "parameter state");
      stack_.push_back(args[0]);
      return;
    }
    case Global::kStorageType:
      fail("a storage type cannot be called");
  }
  fail("unsupported REDUCE");
}

// Kept whole: one switch over the opcodes, a few lines per opcode; the dispatch table reads best in one piece.
size_t Machine::run() {
  for (;;) {
    op_pos_ = pos_;
    const uint8_t op = *take(1);
    switch (op) {
      case 0x80: {  // PROTO
        const uint8_t v = *take(1);
        if (v < 2 || v > 5) fail("unsupported pickle protocol " + std::to_string(v));
        break;
      }
      case 0x95:  // FRAME: a length prefix; the frame's opcodes follow inline
        if (le(8) > size_ - pos_) fail("pickle FRAME longer than the data");
        break;
      case '(': marks_.push_back(stack_.size()); break;                      // MARK
      case '}': push_new(Node(Node::kDict)); break;                          // EMPTY_DICT
      case ']': push_new(Node(Node::kList)); break;                          // EMPTY_LIST
      case ')': push_new(Node(Node::kTuple)); break;                         // EMPTY_TUPLE
      case 'N': push_new(Node(Node::kNone)); break;                          // NONE
      case 0x88: case 0x89: {                                                // NEWTRUE, NEWFALSE
        Node n(Node::kBool);
        n.i = op == 0x88;
        push_new(std::move(n));
        break;
      }
      case 'J': case 'K': case 'M': case 0x8a: {  // BININT, BININT1, BININT2, LONG1
        Node n(Node::kInt);
        if (op == 'J') {
          n.i = static_cast<int32_t>(static_cast<uint32_t>(le(4)));
        } else if (op == 'K') {
          n.i = static_cast<int64_t>(le(1));
        } else if (op == 'M') {
          n.i = static_cast<int64_t>(le(2));
        } else {
          const size_t len = *take(1);
          if (len > 8) fail("pickle LONG1 wider than 64 bits");
          uint64_t v = le(len);
          if (len > 0 && len < 8 && (v >> (8 * len - 1)) & 1) v |= ~uint64_t{0} << (8 * len);  // sign-extend
          n.i = static_cast<int64_t>(v);
        }
        push_new(std::move(n));
        break;
      }
      case 'G': {  // BINFLOAT (big-endian double)
        const uint8_t* q = take(8);
        uint64_t bits = 0;
        for (int k = 0; k < 8; ++k) bits = (bits << 8) | q[k];
        Node n(Node::kFloat);
        n.i = static_cast<int64_t>(bits);
        push_new(std::move(n));
        break;
      }
      case 'X': case 0x8c: case 0x8d: {  // BINUNICODE, SHORT_BINUNICODE, BINUNICODE8
        const uint64_t len = le(op == 'X' ? 4 : op == 0x8c ? 1 : 8);
        if (len > size_ - pos_) fail("pickle string longer than the data");
        Node n(Node::kStr);
        n.s.assign(reinterpret_cast<const char*>(take(len)), len);
        push_new(std::move(n));
        break;
      }
      case 't': case 0x85: case 0x86: case 0x87: {  // TUPLE, TUPLE1, TUPLE2, TUPLE3
        Node n(Node::kTuple);
        if (op == 't') {
          n.items = pop_mark();
        } else {
          n.items.resize(op - 0x84);
          for (size_t k = n.items.size(); k-- > 0;) n.items[k] = pop();
        }
        push_new(std::move(n));
        break;
      }
      case 'a': case 'e': {  // APPEND, APPENDS
        std::vector<size_t> items = op == 'a' ? std::vector<size_t>{pop()} : pop_mark();
        const size_t list = top();
        if (nodes_[list].kind != Node::kList) fail("APPEND to a " + std::string(kind_name(nodes_[list].kind)));
        nodes_[list].items.insert(nodes_[list].items.end(), items.begin(), items.end());
        break;
      }
      case 's': case 'u': {  // SETITEM, SETITEMS
        std::vector<size_t> kv;
        if (op == 's') {
          const size_t v = pop(), k = pop();
          kv = {k, v};
        } else {
          kv = pop_mark();
        }
        if (kv.size() % 2 != 0) fail("SETITEMS with an odd number of items");
        const size_t dict = top();
        if (nodes_[dict].kind != Node::kDict) fail("SETITEM on a " + std::string(kind_name(nodes_[dict].kind)));
        nodes_[dict].items.insert(nodes_[dict].items.end(), kv.begin(), kv.end());
        break;
      }
      case 'q': case 'r': case 0x94:  // BINPUT, LONG_BINPUT, MEMOIZE
        memo_[op == 0x94 ? memo_.size() : le(op == 'q' ? 1 : 4)] = top();
        break;
      case 'h': case 'j': {  // BINGET, LONG_BINGET
        auto it = memo_.find(le(op == 'h' ? 1 : 4));
        if (it == memo_.end()) fail("pickle memo entry missing");
        stack_.push_back(it->second);
        break;
      }
      case 'c': {  // GLOBAL
        const std::string module = line();
        global(module, line());
        break;
      }
      case 0x93: {  // STACK_GLOBAL
        const size_t name = pop(), module = pop();
        global(of(module, Node::kStr, "a global's module").s, of(name, Node::kStr, "a global's name").s);
        break;
      }
      case 'Q': persistent_id(); break;  // BINPERSID
      case 'R': reduce(); break;         // REDUCE
      case 'b': {                        // BUILD: only a dict's (OrderedDict's) attributes, ignored
        const size_t state = pop(), obj = top();
        if (nodes_[obj].kind != Node::kDict || (nodes_[state].kind != Node::kDict && nodes_[state].kind != Node::kNone)) {
          fail(std::string("BUILD of a ") + kind_name(nodes_[obj].kind) + " is not supported");
        }
        break;
      }
      case '.':  // STOP
        if (stack_.size() != 1 || !marks_.empty()) fail("pickle STOP with a malformed stack");
        return stack_.back();
      default: {
        static const char hex[] = "0123456789abcdef";
        std::string shown = "0x";
        shown += hex[op >> 4];
        shown += hex[op & 15];
        if (op >= 0x20 && op < 0x7f) shown += std::string(" '") + static_cast<char>(op) + "'";
        fail("unsupported pickle opcode " + shown);
      }
    }
    if (stack_.size() > (size_t{1} << 24) || marks_.size() > (size_t{1} << 20)) fail("pickle stack too deep");
  }
}

}  // namespace

StateDict load_state_dict(const uint8_t* data, size_t size, const std::string& origin, size_t* consumed) {
  Machine m(data, size, origin);
  const size_t root = m.run();
  if (consumed) *consumed = m.consumed();
  const Node& dict = m.node(root);
  if (dict.kind != Node::kDict) {
    throw Error(origin + ": the pickle holds a " + kind_name(dict.kind) + ", not a state dict");
  }
  StateDict out;
  out.storages = m.storages;
  std::map<std::string, int> seen;
  for (size_t k = 0; k < dict.items.size(); k += 2) {
    const Node& key = m.node(dict.items[k]);
    const Node& value = m.node(dict.items[k + 1]);
    if (key.kind != Node::kStr) throw Error(origin + ": a state dict key is a " + kind_name(key.kind) + ", not a str");
    if (value.kind != Node::kTensor) {
      throw Error(origin + ": state dict entry '" + key.s + "' is a " + kind_name(value.kind) + ", not a tensor");
    }
    if (!seen.emplace(key.s, 0).second) throw Error(origin + ": state dict entry '" + key.s + "' appears twice");
    out.tensors.emplace_back(key.s, m.tensors[static_cast<size_t>(value.i)]);
  }
  return out;
}

std::vector<std::string> load_string_list(const uint8_t* data, size_t size, const std::string& origin, size_t* consumed) {
  Machine m(data, size, origin);
  const Node& list = m.node(m.run());
  *consumed = m.consumed();
  if (list.kind != Node::kList) throw Error(origin + ": expected a list of storage keys");
  std::vector<std::string> out;
  for (size_t i : list.items) {
    if (m.node(i).kind != Node::kStr) throw Error(origin + ": a storage key is not a str");
    out.push_back(m.node(i).s);
  }
  return out;
}

bool load_sys_info_little_endian(const uint8_t* data, size_t size, const std::string& origin, size_t* consumed) {
  Machine m(data, size, origin);
  const Node& dict = m.node(m.run());
  *consumed = m.consumed();
  if (dict.kind != Node::kDict) throw Error(origin + ": legacy sys_info is not a dict");
  for (size_t k = 0; k + 1 < dict.items.size(); k += 2) {
    const Node& key = m.node(dict.items[k]);
    const Node& value = m.node(dict.items[k + 1]);
    if (key.kind == Node::kStr && key.s == "little_endian") return value.kind == Node::kBool && value.i == 1;
  }
  return false;
}

}  // namespace io::pickle
