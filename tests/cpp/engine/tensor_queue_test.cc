// TensorQueue's duplicate-name check on batches (a group's entries are pushed at once): a name
// pending from an earlier push or twice in the batch rejects the whole batch and leaves the queue
// and its name slots as they were.
#include "engine/tensor_queue.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "horovod/errors.h"

namespace hvd::engine {
namespace {

std::vector<EntryPtr> batch(TensorQueue& q, const std::vector<std::string>& names) {
  std::vector<EntryPtr> out;
  for (const auto& name : names) {
    EntryPtr e = q.acquire();
    e->request.name = name;
    out.push_back(std::move(e));
  }
  return out;
}

size_t drained(TensorQueue& q) {
  std::vector<EntryPtr> out;
  q.drain(out);
  return out.size();
}

TEST(TensorQueue, DuplicateInsideABatchAddsNothing) {
  TensorQueue q;
  auto entries = batch(q, {"a", "b", "c", "b"});
  EXPECT_THROW(q.push(entries), InvalidArgument);
  EXPECT_EQ(entries.size(), 4u);  // the caller keeps its entries
  EXPECT_TRUE(q.empty());
  for (const char* name : {"a", "b", "c"}) EXPECT_EQ(q.find(0, name), nullptr) << name;
  auto again = batch(q, {"a", "b", "c"});
  q.push(again);
  EXPECT_EQ(drained(q), 3u);
  EXPECT_TRUE(q.find(0, "b")->pending);
}

TEST(TensorQueue, NamePendingFromAnEarlierPushRejectsTheBatch) {
  TensorQueue q;
  auto first = batch(q, {"x"});
  q.push(first);
  auto second = batch(q, {"y", "x"});
  EXPECT_THROW(q.push(second), InvalidArgument);
  EXPECT_EQ(q.find(0, "y"), nullptr);
  ASSERT_NE(q.find(0, "x"), nullptr);
  EXPECT_TRUE(q.find(0, "x")->pending);
  EXPECT_EQ(drained(q), 1u);
  // The same name in another process set is another name.
  auto other = batch(q, {"x"});
  other[0]->request.params.processSet = 1;
  q.push(other);
  EXPECT_EQ(drained(q), 1u);
}

TEST(TensorQueue, KeptSlotSurvivesARejectedBatch) {
  TensorQueue q;
  auto first = batch(q, {"k"});
  q.push(first);
  std::vector<EntryPtr> out;
  q.drain(out);
  q.release(std::move(out[0]), /*keepSlot=*/true);  // a cached name keeps its slot
  NameSlot* kept = q.find(0, "k");
  ASSERT_NE(kept, nullptr);
  auto second = batch(q, {"k", "k"});
  EXPECT_THROW(q.push(second), InvalidArgument);
  EXPECT_EQ(q.find(0, "k"), kept);
  EXPECT_FALSE(kept->pending);
}

}  // namespace
}  // namespace hvd::engine
