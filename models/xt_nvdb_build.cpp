// The one C++ file of the NanoVDB kind: nanovdb::GridBuilder (Debian's libnanovdb-dev, NanoVDB
// 32.4, header only) turns a voxel volume into a grid, and nanovdb::io writes .nvdb files. C
// callers see xt_nvdb_build.h only; every exception is caught here and becomes an xt_msg line.
//
// The grid carries the xtwin record (xt_nvdb.h) as its one blind-data entry: GridBuilder reserves
// the bytes, and this file fills the entry after getHandle (the checksum covers the grid's header
// part only, which the entry is not in; it is recomputed anyway).
#include <nanovdb/util/GridBuilder.h>
#include <nanovdb/util/GridChecksum.h>
#include <nanovdb/util/GridValidator.h>
#include <nanovdb/util/IO.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

extern "C" {
#include "xt_nvdb.h"
#include "xt_nvdb_build.h"
}

namespace {

uint64_t record_bytes(const xt_volume *v) {
  const int nmat = v->materials ? v->materials->count : 0;
  return XT_NVDB_RECORD_HEADER + (uint64_t)nmat * XT_NVDB_RECORD_MATERIAL;
}

// The xtwin record's bytes (layout: xt_nvdb.h).
void fill_record(const xt_volume *v, unsigned char *p) {
  const int labels = v->type == XT_VOXEL_U8;
  const int nmat = labels ? v->materials->count : 0;
  std::memset(p, 0, record_bytes(v));
  std::memcpy(p, XT_NVDB_RECORD_MAGIC, 8);
  const uint32_t ver = XT_NVDB_RECORD_VERSION, flags = labels ? 1u : 0u, n = (uint32_t)nmat;
  std::memcpy(p + 8, &ver, 4);
  std::memcpy(p + 12, &flags, 4);
  for (int a = 0; a < 3; a++) {
    const int32_t lo = 0, hi = v->dim[a] - 1;
    std::memcpy(p + 16 + 4 * a, &lo, 4);
    std::memcpy(p + 28 + 4 * a, &hi, 4);
  }
  /* labels: the table's energy; mu grids: the energy the mu values are for, so that material
   * channels convert them back to density at it (0 = unknown: XT_DEFAULT_ENERGY_KEV) */
  const double e = labels ? v->materials->energy_kev : v->energy_kev;
  std::memcpy(p + 40, &e, 8);
  std::memcpy(p + 48, &n, 4);
  for (int i = 0; i < nmat; i++) {
    unsigned char *m = p + XT_NVDB_RECORD_HEADER + (size_t)i * XT_NVDB_RECORD_MATERIAL;
    std::memcpy(m, &v->materials->mu[i], 4);
    std::memcpy(m + 8, &v->materials->density[i], 8);
    std::memcpy(m + 16, v->materials->name[i], XT_MATERIAL_NAME_MAX);
    m[16 + XT_MATERIAL_NAME_MAX - 1] = 0;
  }
}

// The volume's index_to_model as a NanoVDB map (Map::set stores the transpose of what it gets).
nanovdb::Map make_map(const xt_volume *v) {
  xt_affine inv;
  if (!xt_aff_invert(&v->index_to_model, &inv)) throw std::runtime_error("the volume's index-to-model map is singular");
  double m[3][3], mi[3][3];
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++) {
      m[j][i] = v->index_to_model.m[i][j];
      mi[j][i] = inv.m[i][j];
    }
  nanovdb::Map map;
  map.set(m, mi, nanovdb::Vec3d(v->index_to_model.t[0], v->index_to_model.t[1], v->index_to_model.t[2]), 1.0);
  return map;
}

// NanoVDB 32.4's GridBuilder::operator() prunes a full leaf whose 512 active values are equal
// into a tile, and a lower node whose 4096 entries are equal tiles into an upper-node tile. Its
// test, `while (n < 512) if (v[n++] != first) break; if (n == 512) prune`, also reaches 512 when
// only the LAST value differs, so such a block is replaced by its first value (found by
// converting the head phantom; tested in test_nvdb.c). Each such block is found here from the
// source values and its voxels are set again through the builder's accessor, which turns the
// tile back into a node holding the tile's value and then sets the true ones.
template <typename ValueT, typename Builder, typename Func>
void repair_prune(Builder &b, const Func &func, ValueT bg, const int dim[3]) {
  using nanovdb::Coord;
  auto acc = b.getAccessor();
  // What the builder keeps for a full 8^3 block at o after its leaf prune: a tile (value *t) when
  // the block is all background (no leaf: an inactive background tile) or its first 511 values
  // are equal and active and the last is active too; else (false) a leaf.
  auto entry = [&](const Coord &o, ValueT *t) {
    const ValueT first = func(o);
    for (int n = 1; n < 511; n++)
      if (!(func(o + Coord(n >> 6, (n >> 3) & 7, n & 7)) == first)) return false;
    const ValueT last = func(o + Coord(7));
    if (first == bg && !(last == bg)) return false;
    if (!(first == bg) && last == bg) return false;
    *t = first;
    return true;
  };
  auto reset_block = [&](const Coord &o) {
    for (int n = 0; n < 512; n++) {
      const Coord c = o + Coord(n >> 6, (n >> 3) & 7, n & 7);
      acc.setValue(c, func(c)); // background voxels become active background: the same integral
    }
  };
  // Lower nodes first: a full 128^3 block whose 4096 entries are all tiles, equal but the last.
  for (int z = 0; z + 128 <= dim[2]; z += 128)
    for (int y = 0; y + 128 <= dim[1]; y += 128)
      for (int x = 0; x + 128 <= dim[0]; x += 128) {
        ValueT first{}, t{};
        bool bug = true;
        for (int n = 0; n < 4096 && bug; n++) {
          const Coord o(x + 8 * (n >> 8), y + 8 * ((n >> 4) & 15), z + 8 * (n & 15));
          bug = entry(o, &t);
          if (n == 0) first = t;
          else if (n < 4095) bug = bug && t == first;
          else bug = bug && !(t == first);
        }
        if (bug) reset_block(Coord(x + 120, y + 120, z + 120));
      }
  // Leaves: a full block whose first 511 values agree and whose last differs.
  for (int z = 0; z + 8 <= dim[2]; z += 8)
    for (int y = 0; y + 8 <= dim[1]; y += 8)
      for (int x = 0; x + 8 <= dim[0]; x += 8) {
        const Coord o(x, y, z);
        ValueT t{};
        if (entry(o, &t) && !(t == bg) && !(func(o + Coord(7)) == t)) acc.setValue(o + Coord(7), func(o + Coord(7)));
      }
}

template <typename ValueT, typename BuildT, typename Func>
nanovdb::GridHandle<> build_grid(const xt_volume *v, ValueT bg, nanovdb::GridClass cls, const Func &func,
                                 const std::string &name, double fpn_tol) {
  nanovdb::GridBuilder<ValueT, BuildT> b(bg, cls, record_bytes(v));
  b.setChecksum(nanovdb::ChecksumMode::Partial);
  const nanovdb::CoordBBox box(nanovdb::Coord(0), nanovdb::Coord(v->dim[0] - 1, v->dim[1] - 1, v->dim[2] - 1));
  b(func, box);
  repair_prune<ValueT>(b, func, bg, v->dim);
  nanovdb::GridHandle<> h = b.getHandle(make_map(v), name, nanovdb::AbsDiff(fpn_tol > 0 ? (float)fpn_tol : 1e-4f));
  auto *data = reinterpret_cast<nanovdb::GridData *>(h.data());
  if (data->mBlindMetadataCount != 1) throw std::runtime_error("GridBuilder made no blind data entry");
  auto *meta = reinterpret_cast<nanovdb::GridBlindMetaData *>(h.data() + data->mBlindMetadataOffset);
  meta->mElementCount = record_bytes(v);
  meta->mFlags = 0;
  meta->mSemantic = nanovdb::GridBlindDataSemantic::Unknown;
  meta->mDataClass = nanovdb::GridBlindDataClass::Unknown;
  meta->mDataType = nanovdb::GridType::Unknown;
  std::memset(meta->mName, 0, sizeof meta->mName);
  std::strncpy(meta->mName, XT_NVDB_RECORD_NAME, sizeof meta->mName - 1);
  fill_record(v, reinterpret_cast<unsigned char *>(meta) + meta->mByteOffset);
  auto *grid = h.template grid<BuildT>();
  if (!grid) throw std::runtime_error("GridBuilder made a grid of another type");
  nanovdb::updateChecksum(*grid, nanovdb::ChecksumMode::Partial);
  return h;
}


// The sparse index form (XT_NVDB_Q_INDEX): the Float grid's tree re-laid as a NanoVDB 32.4
// IndexGrid (GridType::Index, GridClass::IndexGrid) whose leaves carry the "sparse" flag (bit 4 of
// the leaf flags: only active voxels are indexed, LeafData<ValueIndex>::getValue), and one float
// channel (blind data 0, class ChannelArray, read by NanoVDB's ChannelAccessor) holding the values:
// index 0 the background, then one entry per active tile, then each leaf's active voxels in mask
// order. A Float leaf is 2,144 B whatever its occupancy; here a leaf is 96 B plus 4 B per active
// voxel, which is what a CT cut by its skin needs (docs/BENCHMARKS.md, issue 29). Debian's 32.4
// has no IndexGridBuilder, so the layout is written here with NanoVDB's own node types (their
// sizes and members) and then checked by NanoVDB itself: GridValidator (full checksum, every node
// pointer) and, over every voxel of the domain, ChannelAccessor against the Float grid.
using IdxGrid = nanovdb::NanoGrid<nanovdb::ValueIndex>;
using IdxRoot = nanovdb::NanoRoot<nanovdb::ValueIndex>;
using IdxUpper = nanovdb::NanoUpper<nanovdb::ValueIndex>;
using IdxLower = nanovdb::NanoLower<nanovdb::ValueIndex>;
using IdxLeaf = nanovdb::NanoLeaf<nanovdb::ValueIndex>;

uint64_t align32(uint64_t n) { return (n + 31) & ~(uint64_t)31; }

// Tiles of an internal node that are active: value bit on, child bit off (GridBuilder 32.4 can leave
// the value bit on where the repair above put a child).
template <typename NodeDataT> uint64_t active_tiles(const NodeDataT *d, uint32_t entries) {
  uint64_t n = 0;
  for (uint32_t i = 0; i < entries; i++) n += d->mValueMask.isOn(i) && !d->mChildMask.isOn(i);
  return n;
}

// The index form's size, known from the Float grid before it is made.
uint64_t index_bytes(const nanovdb::GridHandle<> &fh, const xt_volume *v) {
  using namespace nanovdb;
  const NanoGrid<float> *fg = fh.grid<float>();
  const auto &t = fg->tree();
  const auto *rd = t.root().data();
  uint64_t values = 1; // the background, active tiles, active leaf voxels
  for (uint32_t i = 0; i < rd->mTableSize; i++) {
    const auto *tile = rd->tile(i);
    if (!tile->isChild()) {
      values += tile->isActive() ? 1 : 0;
      continue;
    }
    const auto *up = rd->getChild(tile);
    values += active_tiles(up->data(), 32768);
    for (uint32_t n = 0; n < 32768; n++) {
      if (!up->data()->mChildMask.isOn(n)) continue;
      const auto *lo = up->data()->getChild(n);
      values += active_tiles(lo->data(), 4096);
      for (uint32_t m = 0; m < 4096; m++)
        if (lo->data()->mChildMask.isOn(m)) values += lo->data()->getChild(m)->data()->mValueMask.countOn();
    }
  }
  return sizeof(GridData) + sizeof(TreeData<3>) + IdxRoot::memUsage(t.root().data()->mTableSize) +
         t.nodeCount(2) * IdxUpper::memUsage() + t.nodeCount(1) * IdxLower::memUsage() +
         t.nodeCount(0) * IdxLeaf::DataType::memUsage() + 2 * sizeof(GridBlindMetaData) +
         align32(values * sizeof(float)) + align32(record_bytes(v));
}

nanovdb::GridHandle<> index_from_float(const nanovdb::GridHandle<> &fh, const xt_volume *v) {
  using namespace nanovdb;
  const NanoGrid<float> *fg = fh.grid<float>();
  if (!fg) throw std::runtime_error("index form: no Float grid to re-lay");
  const auto &froot = fg->tree().root();
  // The nodes in depth-first order: the new grid lays each level out in this order.
  std::vector<const NanoUpper<float> *> ups;
  std::vector<const NanoLower<float> *> lows;
  std::vector<const NanoLeaf<float> *> leaves;
  for (uint32_t t = 0; t < froot.data()->mTableSize; t++) {
    const auto *tile = froot.data()->tile(t);
    if (!tile->isChild()) continue;
    const auto *up = froot.data()->getChild(tile);
    ups.push_back(up);
    for (uint32_t n = 0; n < 32768; n++) {
      if (!up->data()->mChildMask.isOn(n)) continue;
      const auto *lo = up->data()->getChild(n);
      lows.push_back(lo);
      for (uint32_t m = 0; m < 4096; m++)
        if (lo->data()->mChildMask.isOn(m)) leaves.push_back(lo->data()->getChild(m));
    }
  }
  const uint32_t ntiles = froot.data()->mTableSize;
  const uint64_t o_tree = sizeof(GridData);
  const uint64_t o_root = o_tree + sizeof(TreeData<3>);
  const uint64_t o_up = o_root + IdxRoot::memUsage(ntiles);
  const uint64_t o_low = o_up + ups.size() * IdxUpper::memUsage();
  const uint64_t o_leaf = o_low + lows.size() * IdxLower::memUsage();
  const uint64_t o_meta = o_leaf + leaves.size() * IdxLeaf::DataType::memUsage();
  // Values: background, active tiles, active leaf voxels.
  uint64_t count = 1;
  for (uint32_t t = 0; t < ntiles; t++) count += froot.data()->tile(t)->isActive() ? 1 : 0;
  for (const auto *up : ups) count += active_tiles(up->data(), 32768);
  for (const auto *lo : lows) count += active_tiles(lo->data(), 4096);
  for (const auto *lf : leaves) count += lf->data()->mValueMask.countOn();
  const uint64_t o_chan = o_meta + 2 * sizeof(GridBlindMetaData);
  const uint64_t o_rec = o_chan + align32(count * sizeof(float));
  const uint64_t total = o_rec + align32(record_bytes(v));

  HostBuffer buf = HostBuffer::create(total);
  uint8_t *b = buf.data();
  std::memset(b, 0, total);
  float *chan = reinterpret_cast<float *>(b + o_chan);
  uint64_t next = 0;
  auto add = [&](float x) { chan[next] = x; return next++; };
  add(froot.background());

  auto *gd = reinterpret_cast<GridData *>(b);
  std::memcpy(gd, fg->data(), sizeof(GridData));
  gd->mGridSize = total;
  gd->mGridClass = GridClass::IndexGrid;
  gd->mGridType = GridType::Index;
  gd->mBlindMetadataOffset = (int64_t)o_meta;
  gd->mBlindMetadataCount = 2;
  gd->mData1 = count;
  gd->setMinMaxOn(false);
  gd->setAverageOn(false);
  gd->setStdDeviationOn(false);

  auto *td = reinterpret_cast<TreeData<3> *>(b + o_tree);
  std::memcpy(td, &fg->tree(), sizeof(TreeData<3>));
  // where each level starts, also when it is empty (as GridBuilder does: io::writeGrid needs them)
  td->mNodeOffset[0] = o_leaf - o_tree;
  td->mNodeOffset[1] = o_low - o_tree;
  td->mNodeOffset[2] = o_up - o_tree;
  td->mNodeOffset[3] = o_root - o_tree;

  auto *rd = reinterpret_cast<IdxRoot::DataType *>(b + o_root);
  rd->mBBox = froot.data()->mBBox;
  rd->mTableSize = ntiles;
  rd->mBackground = 0;
  size_t iu = 0, il = 0, ilf = 0;
  for (uint32_t t = 0; t < ntiles; t++) {
    const auto *ft = froot.data()->tile(t);
    auto *it = rd->tile(t);
    it->key = ft->key;
    it->state = ft->state;
    if (ft->isChild()) {
      const auto *up = froot.data()->getChild(ft);
      auto *ud = reinterpret_cast<IdxUpper::DataType *>(b + o_up + iu * IdxUpper::memUsage());
      iu++;
      it->child = (int64_t)(reinterpret_cast<uint8_t *>(ud) - reinterpret_cast<uint8_t *>(rd));
      it->value = 0;
      ud->mBBox = up->data()->mBBox;
      ud->mFlags = up->data()->mFlags;
      ud->mValueMask = up->data()->mValueMask;
      ud->mChildMask = up->data()->mChildMask;
      for (uint32_t n = 0; n < 32768; n++) // an entry is a child or a tile
        if (ud->mChildMask.isOn(n)) ud->mValueMask.setOff(n);
      for (uint32_t n = 0; n < 32768; n++) {
        if (!up->data()->mChildMask.isOn(n)) {
          ud->mTable[n].value = up->data()->mValueMask.isOn(n) ? add(up->data()->mTable[n].value) : 0;
          continue;
        }
        const auto *lo = up->data()->getChild(n);
        auto *ld = reinterpret_cast<IdxLower::DataType *>(b + o_low + il * IdxLower::memUsage());
        il++;
        ud->mTable[n].child = (int64_t)(reinterpret_cast<uint8_t *>(ld) - reinterpret_cast<uint8_t *>(ud));
        ld->mBBox = lo->data()->mBBox;
        ld->mFlags = lo->data()->mFlags;
        ld->mValueMask = lo->data()->mValueMask;
        ld->mChildMask = lo->data()->mChildMask;
        for (uint32_t m = 0; m < 4096; m++)
          if (ld->mChildMask.isOn(m)) ld->mValueMask.setOff(m);
        for (uint32_t m = 0; m < 4096; m++) {
          if (!lo->data()->mChildMask.isOn(m)) {
            ld->mTable[m].value = lo->data()->mValueMask.isOn(m) ? add(lo->data()->mTable[m].value) : 0;
            continue;
          }
          const auto *lf = lo->data()->getChild(m);
          auto *fd = reinterpret_cast<IdxLeaf::DataType *>(b + o_leaf + ilf * IdxLeaf::DataType::memUsage());
          ilf++;
          ld->mTable[m].child = (int64_t)(reinterpret_cast<uint8_t *>(fd) - reinterpret_cast<uint8_t *>(ld));
          fd->mBBoxMin = lf->data()->mBBoxMin;
          for (int a = 0; a < 3; a++) fd->mBBoxDif[a] = lf->data()->mBBoxDif[a];
          fd->mFlags = (uint8_t)((lf->data()->mFlags & 3u) | 16u); // keep skip/bbox bits; sparse
          fd->mValueMask = lf->data()->mValueMask;
          fd->mStatsOff = 0;
          fd->mValueOff = next;
          for (uint32_t i = 0; i < 512; i++)
            if (lf->data()->mValueMask.isOn(i)) add(lf->data()->getValue(i));
        }
      }
    } else {
      it->child = 0;
      it->value = ft->isActive() ? add(ft->value) : 0;
    }
  }
  if (next != count || iu != ups.size() || il != lows.size() || ilf != leaves.size() || total != index_bytes(fh, v))
    throw std::runtime_error("index form: node or value count mismatch (" + std::to_string(next) + " " +
                             std::to_string(count) + " " + std::to_string(total) + " " +
                             std::to_string(index_bytes(fh, v)) + ")");

  auto *meta = reinterpret_cast<GridBlindMetaData *>(b + o_meta);
  meta[0].mByteOffset = (int64_t)(o_chan - o_meta);
  meta[0].mElementCount = count;
  meta[0].mFlags = 0;
  meta[0].mSemantic = GridBlindDataSemantic::Unknown;
  meta[0].mDataClass = GridBlindDataClass::ChannelArray;
  meta[0].mDataType = GridType::Float;
  std::strncpy(meta[0].mName, XT_NVDB_CHANNEL_NAME, sizeof meta[0].mName - 1);
  meta[1].mByteOffset = (int64_t)(o_rec - o_meta - sizeof(GridBlindMetaData));
  meta[1].mElementCount = record_bytes(v);
  meta[1].mFlags = 0;
  meta[1].mSemantic = GridBlindDataSemantic::Unknown;
  meta[1].mDataClass = GridBlindDataClass::Unknown;
  meta[1].mDataType = GridType::Unknown;
  std::strncpy(meta[1].mName, XT_NVDB_RECORD_NAME, sizeof meta[1].mName - 1);
  fill_record(v, b + o_rec);

  GridHandle<> h(std::move(buf));
  IdxGrid *ig = h.grid<ValueIndex>();
  if (!ig) throw std::runtime_error("index form: NanoVDB does not take the grid as an IndexGrid");
  updateChecksum(*ig, ChecksumMode::Full);
  const std::string err = GridValidator<ValueIndex>::check(*ig, true);
  if (!err.empty()) throw std::runtime_error("index form: NanoVDB's GridValidator: " + err);
  // Through NanoVDB's own accessors: every voxel of every leaf, and the first voxel of every tile
  // and of every empty 8^3 block of the domain - the channel's value (inactive: the background,
  // index 0) equals the Float grid's, and the active states agree. (Readers check every voxel
  // again against the source: test_nvdb, test_real_ct.)
  ChannelAccessor<const float> ca(*ig, 0u);
  auto fa = fg->getAccessor();
  const float bg = froot.background();
  auto same = [&](const Coord &c) {
    float x = 0.f;
    const bool on = ca.probeValue(c, x);
    const bool fon = fa.isActive(c);
    return on == fon && (on ? x == fa.getValue(c) : ca.getIndex(c) == 0 && x == bg);
  };
  for (const auto *lf : leaves)
    for (uint32_t i = 0; i < 512; i++)
      if (!same(lf->origin() + Coord(int(i >> 6), int((i >> 3) & 7), int(i & 7))))
        throw std::runtime_error("index form: the index grid differs from the Float grid in a leaf");
  for (int k = 0; k < v->dim[2]; k += 8)
    for (int j = 0; j < v->dim[1]; j += 8)
      for (int i = 0; i < v->dim[0]; i += 8)
        if (!same(Coord(i, j, k))) throw std::runtime_error("index form: the index grid differs from the Float grid");
  return h;
}

nanovdb::GridHandle<> build_any(const xt_volume *v, const xt_nvdb_build_options *o) {
  const size_t nx = (size_t)v->dim[0], ny = (size_t)v->dim[1];
  const std::string name = o->name && *o->name ? o->name : (v->type == XT_VOXEL_U8 ? "labels" : "density");
  if (v->type == XT_VOXEL_U8) {
    const uint8_t *d = static_cast<const uint8_t *>(v->data);
    const float bg = (float)o->background;
    auto lab = [=](const nanovdb::Coord &c) { return (float)d[(size_t)c[0] + nx * ((size_t)c[1] + ny * (size_t)c[2])]; };
    switch (o->quant) {
    case XT_NVDB_Q_INT16: {
      auto f = [=](const nanovdb::Coord &c) { return (int16_t)d[(size_t)c[0] + nx * ((size_t)c[1] + ny * (size_t)c[2])]; };
      return build_grid<int16_t, int16_t>(v, (int16_t)o->background, nanovdb::GridClass::Unknown, f, name, 0);
    }
    case XT_NVDB_Q_FLOAT: return build_grid<float, float>(v, bg, nanovdb::GridClass::Unknown, lab, name, 0);
    case XT_NVDB_Q_INDEX:
      return index_from_float(build_grid<float, float>(v, bg, nanovdb::GridClass::Unknown, lab, name, 0), v);
    case XT_NVDB_Q_FP16: return build_grid<float, nanovdb::Fp16>(v, bg, nanovdb::GridClass::Unknown, lab, name, 0);
    case XT_NVDB_Q_FP8: return build_grid<float, nanovdb::Fp8>(v, bg, nanovdb::GridClass::Unknown, lab, name, 0);
    default: throw std::invalid_argument("label volumes need float, index, fp16, fp8 or int16 (fp4 and fpN lose ids)");
    }
  }
  const float *d = static_cast<const float *>(v->data);
  const float bg = (float)o->background, tol = (float)o->tolerance;
  auto mu = [=](const nanovdb::Coord &c) {
    const float x = d[(size_t)c[0] + nx * ((size_t)c[1] + ny * (size_t)c[2])];
    return std::fabs(x - bg) <= tol ? bg : x;
  };
  const auto fog = nanovdb::GridClass::FogVolume;
  switch (o->quant) {
  case XT_NVDB_Q_FLOAT: return build_grid<float, float>(v, bg, fog, mu, name, 0);
  case XT_NVDB_Q_INDEX: return index_from_float(build_grid<float, float>(v, bg, fog, mu, name, 0), v);
  case XT_NVDB_Q_AUTO: { // exact either way: the index form where it is smaller (any grid with a leaf
                         // not fully active), else Float
    nanovdb::GridHandle<> f = build_grid<float, float>(v, bg, fog, mu, name, 0);
    if (index_bytes(f, v) >= f.size()) return f;
    return index_from_float(f, v);
  }
  case XT_NVDB_Q_FP16: return build_grid<float, nanovdb::Fp16>(v, bg, fog, mu, name, 0);
  case XT_NVDB_Q_FP8: return build_grid<float, nanovdb::Fp8>(v, bg, fog, mu, name, 0);
  case XT_NVDB_Q_FP4: return build_grid<float, nanovdb::Fp4>(v, bg, fog, mu, name, 0);
  case XT_NVDB_Q_FPN: return build_grid<float, nanovdb::FpN>(v, bg, fog, mu, name, o->fpn_tolerance);
  default: throw std::invalid_argument("int16 grids hold labels only; dense mu needs float, index, fp16, fp8, fp4 or fpn");
  }
}

} // namespace

extern "C" int xt_nvdb_build(const xt_volume *v, const xt_nvdb_build_options *o, uint32_t **words, uint64_t *bytes,
                             xt_msg *msg) {
  *words = nullptr;
  *bytes = 0;
  if (!v || !v->data || !o) return xt_fail(msg, XT_EINVAL, "nvdb build: no volume");
  if (v->type == XT_VOXEL_U8 && !v->materials) return xt_fail(msg, XT_EINVAL, "nvdb build: labels without a table");
  if (!std::isfinite(o->background) || !std::isfinite(o->tolerance) || o->tolerance < 0)
    return xt_fail(msg, XT_EINVAL, "nvdb build: background and tolerance must be finite, tolerance >= 0");
  if (v->type == XT_VOXEL_U8 && (o->background < 0 || o->background >= v->materials->count ||
                                 o->background != std::floor(o->background)))
    return xt_fail(msg, XT_EINVAL, "nvdb build: background label %g is not in the table", o->background);
  try {
    nanovdb::GridHandle<> h = build_any(v, o);
    const uint64_t n = h.size(), alloc = (n + 31) & ~(uint64_t)31;
    uint32_t *p = static_cast<uint32_t *>(std::aligned_alloc(32, alloc));
    if (!p) return xt_fail(msg, XT_ENOMEM, "nvdb build: out of memory for a %llu-byte grid", (unsigned long long)n);
    std::memset(p, 0, alloc);
    std::memcpy(p, h.data(), n);
    *words = p;
    *bytes = n;
    return 0;
  } catch (const std::bad_alloc &) {
    return xt_fail(msg, XT_ENOMEM, "nvdb build: out of memory");
  } catch (const std::invalid_argument &e) {
    return xt_fail(msg, XT_EINVAL, "nvdb build: %s", e.what());
  } catch (const std::exception &e) {
    return xt_fail(msg, XT_EINTERNAL, "nvdb build: %s", e.what());
  }
}

extern "C" int xt_nvdb_write(FILE *f, const uint32_t *words, uint64_t bytes, int zip, xt_msg *msg) {
  try {
    nanovdb::HostBuffer buf = nanovdb::HostBuffer::create(bytes);
    std::memcpy(buf.data(), words, bytes);
    nanovdb::GridHandle<> h(std::move(buf));
    // io::writeGrid seeks forward past the segment header (at most 16 + 176 + 256 bytes) before
    // writing the grid and comes back for it: a string stream needs those bytes to exist first.
    std::stringstream os(std::ios::in | std::ios::out | std::ios::binary);
    const std::string room(512, '\0');
    os.write(room.data(), (std::streamsize)room.size());
    os.seekp(0);
    nanovdb::io::writeGrid(os, h, zip ? nanovdb::io::Codec::ZIP : nanovdb::io::Codec::NONE);
    const std::streamoff end = os.tellp();
    const std::string s = os.str();
    if (!os || end <= 0 || (size_t)end > s.size()) return xt_fail(msg, XT_EIO, "nvdb write: stream error");
    if (std::fwrite(s.data(), 1, (size_t)end, f) != (size_t)end) return xt_fail(msg, XT_EIO, "nvdb write: short write");
    return 0;
  } catch (const std::bad_alloc &) {
    return xt_fail(msg, XT_ENOMEM, "nvdb write: out of memory");
  } catch (const std::exception &e) {
    return xt_fail(msg, XT_EIO, "nvdb write: %s", e.what());
  }
}
